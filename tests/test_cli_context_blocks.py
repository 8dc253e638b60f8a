"""The JSON Lines context reader reads its input in blocks: the contexts, line numbers and
errors it gives are those of a line-by-line read, whatever the block size and wherever a line,
a bad line or a byte that is not UTF-8 falls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing.cli import _inputs
from rensei_routing.cli._inputs import iter_context_lines, parse_json
from rensei_routing.core.routing._quick import Pieces, quick_context, quick_line
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.errors import InputError

from .strategies import context_dicts

EXAMPLES = Path(_inputs.__file__).resolve().parent.parent / "examples" / "contexts.jsonl"


def _line_by_line(path: Path) -> Iterator[RouteContext]:
    """The plain reader: one line at a time, decoded on its own."""
    label, offset = str(path), 0
    build = partial(RouteContext.from_dict, vocabulary=DEFAULT_VOCABULARY)
    memo: dict[Any, Any] = {}
    pieces = Pieces()
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad = f"byte 0x{raw[e.start]:02x} at offset {offset + e.start}"
                raise InputError(f"cannot read {label}: not UTF-8 ({bad})") from e
            offset += len(raw)
            ctx = quick_line(line, DEFAULT_VOCABULARY, memo, pieces)
            if ctx is None and line.strip(" \t\r\n"):
                where = f"{label}:{number}"
                doc = parse_json(line, where)
                ctx = quick_context(doc, DEFAULT_VOCABULARY, memo) or _inputs._named(
                    where, build, doc
                )
            if ctx is not None:
                yield ctx


def _read(reader: Iterator[RouteContext]) -> tuple[list[bytes], str | None]:
    got: list[bytes] = []
    try:
        for ctx in reader:
            got.append(json.dumps(ctx.to_dict(), sort_keys=True).encode())
    except InputError as e:
        return got, str(e)
    return got, None


_ODD = [
    b"",
    b"   ",
    b"\r",
    b"{}",
    b"not json",
    b'{"repo": 1}',
    b"\xff\xfe",
    "caf\u00e9".encode(),
    "\u00e9".encode()[:1],  # a multi-byte sequence cut short
    b'{"a":"\xe2\x80\xa8"}',
]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            context_dicts().map(
                lambda d: json.dumps(d, ensure_ascii=False, separators=(",", ":")).encode()
            ),
            st.sampled_from(_ODD),
        ),
        max_size=8,
    ),
    st.booleans(),
    st.sampled_from([1, 3, 16, 200, 1 << 20]),
)
def test_blocks_read_as_lines_do(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lines: list[bytes],
    last_newline: bool,
    block: int,
) -> None:
    path = tmp_path / "contexts.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if last_newline and lines else b""))
    monkeypatch.setattr(_inputs, "_BLOCK", block)
    assert _read(iter_context_lines(str(path))) == _read(_line_by_line(path))


def test_the_bad_byte_is_named_with_its_offset_after_the_lines_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = EXAMPLES.read_bytes().split(b"\n")[0]
    path = tmp_path / "contexts.jsonl"
    path.write_bytes(good + b"\nnot json\n" + b'{"x":"\xff"}\n')
    monkeypatch.setattr(_inputs, "_BLOCK", 1 << 20)
    got, error = _read(iter_context_lines(str(path)))
    assert error is not None and f"{path}:2" in error  # the bad line comes before the bad byte
    path.write_bytes(good + b"\n" + good + b'\n{"x":"\xff"}\n')
    got, error = _read(iter_context_lines(str(path)))
    assert len(got) == 2
    assert error == f"cannot read {path}: not UTF-8 (byte 0xff at offset {2 * len(good) + 8})"
