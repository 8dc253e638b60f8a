"""Every doc of ours says what SEMANTICS.md says of a snapshot's signatures: two, with one key,
``signature`` over the 32 raw bytes of the content hash and ``headerSignature`` over the RFC 8785
bytes of the signed header. No sentence of the README, docs/*.md or a docstring may say a
snapshot's ``signature`` is over the header (only the envelope of an earlier release was), and
the pages that define the envelope state both."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: "signature ... over the (signed) header", not said of headerSignature.
_OVER_HEADER = re.compile(
    r"(?<![A-Za-z])signature\b(?:(?!headerSignature)[^.;|]){0,40}\bover the (signed )?header", re.I
)
#: The one true statement of that form: the envelope of an earlier release.
_EARLIER = re.compile(r"earlier release|before `*headerSignature`* existed|written before", re.I)
_HASH_BYTES = re.compile(r"`signature`[^.]{0,50}over the \**32 raw (content-hash )?bytes", re.I)
_HEADER_SIG = re.compile(r"`headerSignature`[^.]{0,30}over the (RFC 8785 )?[^.]{0,20}header")


def _docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                found.append(doc)
    return found


def _texts() -> list[tuple[str, str]]:
    texts = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in _markdown()]
    for path in sorted((ROOT / "rensei_routing").rglob("*.py")):
        texts += [(str(path.relative_to(ROOT)), doc) for doc in _docstrings(path)]
        # the comments that document fields (#: ...) count as docs too
        lines = path.read_text(encoding="utf-8").splitlines()
        texts.append(
            (str(path.relative_to(ROOT)), " ".join(line for line in lines if "#:" in line))
        )
    return texts


def _markdown() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sentences(text: str) -> list[str]:
    flat = re.sub(r"\s+", " ", text)
    return re.split(r"(?<=[.;])\s+(?=[A-Z`(])", flat)


def test_no_doc_says_the_signature_is_over_the_header() -> None:
    wrong = [
        (where, sentence)
        for where, text in _texts()
        for sentence in _sentences(text)
        if _OVER_HEADER.search(sentence) and not _EARLIER.search(sentence)
    ]
    assert wrong == []


@pytest.mark.parametrize("page", ["docs/snapshots.md", "docs/formats.md", "docs/interop.md"])
def test_the_envelope_pages_state_both_signatures(page: str) -> None:
    text = re.sub(r"\s+", " ", (ROOT / page).read_text(encoding="utf-8"))
    assert _HASH_BYTES.search(text), page
    assert _HEADER_SIG.search(text), page


def test_the_checker_catches_the_old_wording() -> None:
    old = "SHA-256 content hash, Ed25519 signature over the signed header with the home's key"
    assert any(_OVER_HEADER.search(s) for s in _sentences(old))
    new = "`headerSignature` over the RFC 8785 bytes of the signed header"
    assert not any(_OVER_HEADER.search(s) for s in _sentences(new))
