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
import json
import os
import sys
from typing import Any

import click

from ..errors import OutputError

__all__ = ["emit", "emit_json", "json_text", "note", "printable"]


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
    except the newlines of the indentation: the others are written as ``\\uXXXX`` escapes,
    which every JSON reader decodes to the same string."""
    if indent is None:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(value, indent=indent, ensure_ascii=False)
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


def note(text: str) -> None:
    """One line on stderr (a warning, a note, a confirmation), made printable."""
    click.echo(printable(text), err=True)
