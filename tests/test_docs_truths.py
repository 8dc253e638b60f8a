"""Doc checks: what the docs say about files a command creates, snapshot ages and output
paths is what the code does."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sentences_about(word: str) -> list[tuple[str, str]]:
    """Every (file, sentence) of the docs mentioning ``word``."""
    found = []
    for doc in DOCS:
        if doc.name == "cli.md":
            continue
        text = " ".join(doc.read_text(encoding="utf-8").split())
        for sentence in re.split(r"(?<=[.;|])\s", text):
            if word in sentence:
                found.append((doc.name, sentence))
    return found


def test_init_creates_the_serve_token_and_the_docs_say_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["--home", str(home), "init"])
    assert result.exit_code == 0, result.output
    token = home / "keys" / "serve.token"
    assert token.is_file() and token.stat().st_mode & 0o777 == 0o600
    creation = [
        (name, s)
        for name, s in _sentences_about("serve.token")
        if re.search(r"\bcreated?\b|\bmakes?\b", s)
    ]
    assert creation, "the docs say where serve.token comes from"
    for name, sentence in creation:
        assert "first serve" not in sentence and "first `serve`" not in sentence, (name, sentence)
    assert any("init" in s for _, s in creation)
    doctor = CliRunner().invoke(cli, ["--home", str(home), "doctor", "--json"])
    assert "created by `rensei serve`" not in doctor.stdout
