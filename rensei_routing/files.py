"""Files, for every side: crash-safe small files (write a temp file, fsync it, rename over the
target, fsync the directory: a crash at any point leaves the old file or the new one, never half
of either), bounded reads, bearer-token files, owner-only modes.

Adapter: file I/O only; decides nothing about what is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

from .errors import ConfigurationError, InputError

__all__ = [
    "PendingWrite",
    "atomic_write",
    "bounded_lines",
    "fsync_dir",
    "make_private_dir",
    "missing_output_dir",
    "mode_is_private",
    "read_limited",
    "removed_on_failure",
    "token_from_file",
]


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it is durable (best effort where unsupported)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def make_private_dir(path: Path, *, parents: bool = False) -> None:
    """Create the directory ``path`` with mode 0700 whatever the umask (one that already exists
    keeps its mode; missing parents, with ``parents``, get the usual umask-derived mode): how
    every home, and every directory of a home, is made.

    Raises:
        OSError: it cannot be created, or ``path`` exists and is not a directory.
    """
    path = Path(path)
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask, which may take bits away


def missing_output_dir(path: Path) -> str | None:
    """The one rule for every output a command writes (a file, or ``backup``'s new directory):
    its directory must exist, since no command creates the directory of an output (a mistyped
    path would otherwise leave a tree of new directories behind). Returns why ``path`` cannot
    be written under that rule, or ``None`` when its directory exists."""
    parent = Path(path).absolute().parent
    if parent.is_dir():
        return None
    return (
        f"cannot write {path}: its directory {parent} does not exist (no command creates the "
        "directory of an output: create it first)"
    )


def atomic_write(path: Path, data: bytes | Iterable[bytes], *, mode: int = 0o644) -> int:
    """Replace ``path`` with ``data`` (bytes, or chunks streamed in order) atomically and
    durably; returns the number of bytes written.

    Raises:
        OSError: the file could not be written (the old file, if any, is untouched); whatever
            iterating ``data`` raises propagates the same way.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), mode)
    total = 0
    try:
        try:
            for chunk in [data] if isinstance(data, bytes) else data:
                view = memoryview(chunk)
                total += len(view)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return total


class PendingWrite:
    """An output made ready before the work that produces it (``host claim --receipt``): the
    temp file is created in the target's directory at once, so a place that cannot be written
    (a read-only mount, a full disk, a directory its owner may not write) fails before any
    work; :meth:`write` fills and fsyncs it, :meth:`commit` renames it over the target (the
    atomic, durable step of :func:`atomic_write`), and leaving the ``with`` block uncommitted
    removes it, so a refused output leaves nothing behind.

    Raises (constructor, :meth:`write`, :meth:`commit`):
        OSError: the file cannot be created, written or renamed (the target is untouched).
    """

    def __init__(self, path: Path, *, mode: int = 0o644) -> None:
        self.path = Path(path)
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        self._fd: int | None = os.open(self._tmp, flags, mode)
        self._done = False

    def write(self, data: bytes) -> None:
        """Write ``data`` into the temp file and fsync it (once, before :meth:`commit`)."""
        assert self._fd is not None, "write() once, before commit()"
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None

    def commit(self) -> None:
        """Rename the written temp file over the target, and fsync the directory."""
        assert self._fd is None, "write() before commit()"
        os.replace(self._tmp, self.path)
        self._done = True
        fsync_dir(self.path.parent)

    def discard(self) -> None:
        """Remove the temp file (nothing is left of an output that was not committed)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)

    def __enter__(self) -> PendingWrite:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.discard()


def _topmost_missing(path: Path) -> Path | None:
    """The highest directory of ``path``'s ancestry (``path`` included) that does not exist;
    ``None`` when ``path`` exists (a dangling symlink counts as existing)."""
    path = Path(path).absolute()
    if path.exists() or path.is_symlink():
        return None
    while not (path.parent.exists() or path.parent.is_symlink()) and path.parent != path:
        path = path.parent
    return path


@contextlib.contextmanager
def removed_on_failure(*paths: Path) -> Iterator[None]:
    """Whatever of ``paths`` did not exist when the block began (each with the missing
    directories above it) is removed if the block raises, and those that existed get back the
    mode they had: a command that fails leaves no file or directory it created. Name only paths
    the block alone may create (never a database's WAL another process may hold).

    Raises:
        whatever the block raises (a removal that fails is ignored: the first error stands).
    """
    missing: list[Path] = []
    modes: dict[Path, int] = {}
    for path in paths:
        top = _topmost_missing(path)
        if top is None:
            with contextlib.suppress(OSError):
                modes[Path(path)] = os.stat(path, follow_symlinks=False).st_mode & 0o7777
        elif top not in missing:
            missing.append(top)
    try:
        yield
    except BaseException:
        import shutil  # only to undo: shutil imports the compression modules

        for path, mode in modes.items():  # e.g. a home directory init tightened to 0700
            with contextlib.suppress(OSError):
                if not path.is_symlink() and os.stat(path).st_mode & 0o7777 != mode:
                    os.chmod(path, mode)
        for top in reversed(missing):
            if top.is_dir() and not top.is_symlink():
                shutil.rmtree(top, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    top.unlink()
        raise


def read_limited(path: Path, limit: int) -> bytes:
    """Read at most ``limit`` bytes of ``path``.

    Raises:
        OSError: unreadable; ``ValueError``: larger than ``limit``.
    """
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def bounded_lines(path: Path, limit: int, *, what: str) -> Iterator[bytes]:
    """The raw lines of ``path`` (split on ``\\n`` only, each with its ``\\n``), each read to at
    most ``limit`` bytes, so memory stays bounded whatever the file holds (``/dev/zero``).

    Raises:
        InputError: a line is longer than ``limit`` (the file is not ``what``).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(limit + 1), b""), 1):
            if len(raw) > limit and not raw.endswith(b"\n"):
                raise InputError(
                    f"{path}: line {number:,} is longer than {limit:,} bytes (not {what})"
                )
            yield raw


def create_new(path: Path, data: bytes, *, mode: int = 0o600) -> bool:
    """Create ``path`` with ``data`` and ``mode`` (0600 unless told), whole, only if it does not
    exist: written to a temporary file and linked into place, so it is never overwritten (one
    another process created meanwhile wins), never seen half-written and never written through
    a symlink. Returns whether this call created it.

    Raises:
        OSError: the file could not be written.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        fsync_dir(path.parent)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def token_from_file(path: str) -> str:
    """A bearer token file's text (one line).

    Raises:
        ConfigurationError: unreadable, empty or too large.
    """
    try:
        data = read_limited(Path(path), 4096)
    except (OSError, ValueError) as e:
        raise ConfigurationError(f"cannot read token file {path}: {e}") from e
    token = data.decode("ascii", errors="replace").strip()
    if not token or any(c.isspace() for c in token):
        raise ConfigurationError(f"token file {path} holds no single-line token")
    return token


def mode_is_private(path: Path) -> bool:
    """Whether ``path`` is readable by its owner only."""
    return (os.stat(path).st_mode & 0o077) == 0
