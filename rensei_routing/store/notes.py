"""Checkpoint note files: reading one, writing one atomically (staged in the same directory,
fsynced, renamed), and refusing an export target inside the home. Owns no table and must not open
the database; the log that makes and stores checkpoints is :mod:`.audit`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from ..core.audit.chain import NOTE_MAX_BYTES, Checkpoint, parse_checkpoint
from ..errors import AuditError, CheckpointFormatError, InputError

__all__ = ["publish", "read_checkpoint", "refuse_protected", "stage", "write_checkpoint"]


def read_checkpoint(path: Path) -> Checkpoint:
    """Read and parse a checkpoint note file (at most ``NOTE_MAX_BYTES``).

    Raises:
        InputError: the file cannot be read.
        CheckpointFormatError: the file is not a checkpoint note (the message names the file).
    """
    try:
        with open(path, "rb") as f:
            data = f.read(NOTE_MAX_BYTES + 1)
    except OSError as e:
        raise InputError(f"cannot read checkpoint {path}: {e.strerror}") from e
    try:
        return parse_checkpoint(data)
    except CheckpointFormatError as e:
        raise CheckpointFormatError(f"{path}: {e}") from e


def write_checkpoint(cp: Checkpoint, path: Path) -> None:
    """Write a checkpoint note to ``path`` atomically: a temporary file in the same directory,
    fsynced, then renamed over ``path`` (and the directory fsynced). On failure ``path`` is
    untouched and no temporary file is left.

    Raises:
        AuditError: the file cannot be written (the message names it).
    """
    path = Path(path)
    staged = stage(cp, path)
    try:
        publish(staged, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise


def _resolved(path: Path) -> Path:
    """``path`` made absolute with every symlink that exists resolved (the rest kept)."""
    return Path(os.path.realpath(path))


def stage(cp: Checkpoint, path: Path) -> Path:
    """Write the note to a fresh temporary file next to ``path`` and fsync it.

    Raises:
        AuditError: it cannot be written (nothing is left behind).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    created = False
    try:
        with open(tmp, "x", encoding="utf-8", newline="\n") as f:
            created = True  # exclusively: only a file made here is ever removed below
            f.write(cp.to_text())
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if created:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise AuditError(f"cannot export the checkpoint to {path}: {e.strerror or e}") from e
    return tmp


def publish(staged: Path, path: Path) -> None:
    """Rename a staged note over ``path``, then fsync the directory (where the OS allows it).

    Raises:
        AuditError: the rename failed (``path`` is untouched).
    """
    try:
        os.replace(staged, path)
    except OSError as e:
        raise AuditError(f"cannot export the checkpoint to {path}: {e.strerror or e}") from e
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def refuse_protected(target: Path, db: Path, protected: Sequence[Path]) -> None:
    """Refuse an export target that is, or (symlinks resolved) lands on, the database ``db``, one
    of its companion files, or anything inside a ``protected`` directory.

    Raises:
        AuditError: naming the target.
    """
    files = {_resolved(db.with_name(db.name + s)) for s in ("", "-wal", "-shm", "-journal")}
    dirs = [_resolved(d) for d in protected]
    # The rename replaces the entry in the target's (resolved) directory; a symlink at the
    # target itself is also followed, to refuse the more cautious reading too.
    for where in {_resolved(target.parent) / target.name, _resolved(target)}:
        if where in files or any(d == where or d in where.parents for d in dirs):
            raise AuditError(
                f"refusing to export the checkpoint to {target}: it is inside the home "
                "(its database, WAL or keys); export it off the home"
            )
