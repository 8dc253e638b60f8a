"""Writing the CLI's output: data on stdout, notes on stderr, and nothing a terminal would obey.

Owns two rules every command follows:

* **No control character reaches a terminal.** Human-readable text goes through
  :func:`printable`, which writes every non-printable character (C0 and C1 controls, DEL,
  line and paragraph separators, bidirectional overrides, unassigned code points, ...) as a
  Python-style escape (``\\x1b``, ``\\u2028``, ``\\U000e0001``); text output is for people, and
  ``--json`` gives the exact values. JSON output writes the same characters as JSON ``\\u``
  escapes (:func:`json_text`), so it stays byte-for-byte parseable to the same values.
* **A failed write to stdout is an error of its own** (:class:`~rensei_routing.errors.OutputError`,
  exit 3 at the root), never a traceback and never mistaken for a verdict. After the failure
  stdout is pointed at the null device, so the interpreter's final flush cannot print a second
  complaint.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, cast

import click

from ..errors import OutputError

__all__ = [
    "emit",
    "emit_file",
    "emit_json",
    "held_notes",
    "json_text",
    "note",
    "printable",
    "printable_json",
    "release_notes",
]


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every non-printable character (``str.isprintable``) escaped, newlines and
    tabs included: one value, or one line, that cannot move the cursor or forge another line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON spells a character beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_text(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON (UTF-8 text, indented or compact) whose every character is printable
    except the newlines of the indentation: the others are written as ``\\u001b``-style escapes,
    which every JSON reader decodes to the same string."""
    if indent is None:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(value, indent=indent, ensure_ascii=False)
    return printable_json(text)


def printable_json(text: str) -> str:
    """JSON text (as ``json.dumps(..., ensure_ascii=False)`` writes it) with every
    non-printable character but the newlines of indentation written as a ``\\u001b``-style
    escape."""
    if text.isprintable():
        return text
    # json.dumps escapes every newline inside a string, so a raw one is indentation.
    return "".join(c if c.isprintable() or c == "\n" else _json_escape(c) for c in text)


def _silence_stdout() -> None:
    """Point file descriptor 1 at the null device (where there is one): what is left in the
    buffer then drains harmlessly when the interpreter exits."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, sys.stdout.fileno())
        finally:
            os.close(fd)


def emit(text: str, *, nl: bool = True) -> None:
    """Write ``text`` (already made printable by the caller) to stdout and flush it.

    Raises:
        OutputError: stdout cannot be written (closed pipe, full device, ...).
    """
    try:
        click.echo(text, nl=nl)  # writes, then flushes
    except OSError as e:
        _silence_stdout()
        raise OutputError(f"cannot write to stdout: {e.strerror or e}") from e


def emit_json(value: Any, *, indent: int | None = 2) -> None:
    """Write ``value`` as JSON (see :func:`json_text`) to stdout.

    Raises:
        OutputError: stdout cannot be written.
    """
    emit(json_text(value, indent=indent))


def emit_file(f: IO[bytes]) -> None:
    """Copy the rest of a binary file (already printable UTF-8 text) to stdout and flush it:
    in the kernel (``os.sendfile``) where the two files allow it, else through one buffer.

    Raises:
        OutputError: stdout cannot be written.
    """
    try:
        sys.stdout.flush()  # whatever the text layer holds goes first
        out = sys.stdout.buffer
        out.flush()
        if not _sent(f, out):
            buffer = bytearray(_COPY_BUFFER)  # one buffer, not a fresh one per read
            view, source = memoryview(buffer), cast("io.BufferedIOBase", f)
            while size := source.readinto(buffer):
                out.write(view[:size])
        out.flush()
    except OSError as e:
        _silence_stdout()
        raise OutputError(f"cannot write to stdout: {e.strerror or e}") from e


_COPY_BUFFER = 1 << 20
#: What ``sendfile`` says, before copying anything, of a pair of files it cannot join (a
#: terminal, an ``O_APPEND`` file, no ``fileno``, a system where the target must be a socket):
#: the copy then goes through a buffer instead.
_CANNOT_SEND = frozenset(
    code
    for code in (
        errno.EINVAL,
        errno.ENOSYS,
        errno.ENOTSOCK,
        errno.EOPNOTSUPP,
        getattr(errno, "ENOTSUP", errno.EOPNOTSUPP),
        errno.EBADF,
        errno.ESPIPE,
    )
)


def _sent(f: IO[bytes], out: IO[bytes]) -> bool:
    """Copy the rest of ``f`` (a real file) to ``out`` with ``os.sendfile``, without bringing
    the bytes into the process: two hundred megabytes of output cost a buffer's worth of page
    faults per megabyte otherwise. False, with nothing copied, when the pair cannot do that.

    Raises:
        OSError: writing failed after the copy began (or for a reason other than the above).
    """
    sendfile = getattr(os, "sendfile", None)
    if sendfile is None:
        return False
    try:
        source, target = f.fileno(), out.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation: a stream held in memory
        return False
    f.flush()  # what a buffered writer still holds is in the file before the kernel reads it
    offset, end = f.tell(), os.fstat(source).st_size
    started = False
    while offset < end:
        try:
            sent = sendfile(target, source, offset, min(end - offset, 1 << 30))
        except OSError as e:
            if not started and e.errno in _CANNOT_SEND:
                return False
            raise
        if sent == 0:  # the file shrank under us: nothing more to send
            break
        offset += sent
        started = True
    f.seek(offset)
    return True


#: Notes held back by :func:`held_notes` (innermost last).
_HELD: list[list[str]] = []


def note(text: str) -> None:
    """One line on stderr (a warning, a note, a confirmation), made printable; held back while
    a :func:`held_notes` block is open."""
    if _HELD:
        _HELD[-1].append(text)
        return
    click.echo(printable(text), err=True)


def next_step(state: str, *commands: str, then: bool = False) -> None:
    """Say on stderr what the state means to do next (doing things in the wrong order
    gets guidance): ``note: STATE; next: `CMD` or `CMD``` (``then``: one after the
    other)."""
    todo = (" then " if then else " or ").join(f"`{c}`" for c in commands)
    note(f"note: {state}; next: {todo}")


@contextlib.contextmanager
def held_notes() -> Iterator[list[str]]:
    """Hold back the notes written inside the block; the caller prints them with
    :func:`release_notes` when it is sure to succeed (or drops them). An exception leaving the
    block prints them first, as they would have been."""
    held: list[str] = []
    _HELD.append(held)
    try:
        yield held
    except BaseException:
        _HELD.remove(held)
        release_notes(held)
        raise
    _HELD.remove(held)


def release_notes(held: list[str]) -> None:
    """Print notes held by :func:`held_notes`."""
    for text in held:
        note(text)
    held.clear()


@contextlib.contextmanager
def progress_bar(total: int) -> Iterator[Callable[[int], None] | None]:
    """A progress callback drawing a bar on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty() or total <= 0:
        yield None
        return
    with click.progressbar(length=total, label="verifying", file=sys.stderr) as bar:
        done = 0

        def update(checked: int) -> None:
            nonlocal done
            bar.update(checked - done)
            done = checked

        yield update
