"""Reading the CLI's input documents: policy files, context documents, JSON Lines batches."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ..core.context import RouteContext
from ..core.policy import PolicySnapshot
from ..errors import InputError, MalformedError
from ._root import read_json_file


def read_document(source: str) -> Any:
    """A JSON document from a file path, ``-`` (stdin), or inline text starting with ``{``/``[``."""
    text = source.lstrip()
    if text.startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise MalformedError("<inline>", f"not valid JSON: {e}") from e
    if source == "-":
        try:
            return json.loads(sys.stdin.read())
        except json.JSONDecodeError as e:
            raise MalformedError("<stdin>", f"not valid JSON: {e}") from e
    return read_json_file(Path(source))


def read_policy_file(path: Path) -> PolicySnapshot:
    """A policy file: an array of policies, or ``{"policies": [...]}`` with optional
    ``revision`` and ``content_hash``.

    Raises:
        InputError: unreadable, not JSON, or not a policy set (the message names the field).
    """
    return PolicySnapshot.from_dict(read_json_file(path))


def read_context(source: str) -> RouteContext:
    """Raises: InputError."""
    return RouteContext.from_dict(read_document(source))


def read_context_lines(path: Path) -> list[RouteContext]:
    """Every context of a JSON Lines file (blank lines skipped), all parsed before any is used.

    Raises:
        InputError: naming the line number and the field of the first bad line.
    """
    try:
        if str(path) == "-":
            lines = sys.stdin.read().splitlines()
        else:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}") from e
    contexts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as e:
            raise MalformedError(f"{path}:{number}", f"not valid JSON: {e}") from e
        try:
            contexts.append(RouteContext.from_dict(doc))
        except MalformedError as e:
            raise MalformedError(f"{path}:{number}: {e.path}", e.message) from e
    return contexts
