"""Reading input documents (``cli/_inputs.py``): bytes that are not UTF-8, on stdin or in a file,
are one clear line; JSON Lines split on ``\\n`` only, so a string may hold U+2028, U+2029 or
U+0085 as JSON allows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
_CLI = "from rensei_routing.cli import cli; cli(prog_name='rensei')"
BAD_UTF8 = b'{"repo": "acme/widgets", "principal_id": "imp\xff\xfelementer"}\n'


def _rensei(args: list[str], stdin: bytes, home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "PYTHONIOENCODING": ""}
    env["RENSEI_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], input=stdin, capture_output=True, env=env, timeout=60
    )


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "-"],
        ["explain-batch", "-"],
        ["policy", "save", "-"],
        ["policy", "validate", "-"],
    ],
    ids=["explain", "explain-batch", "policy-save", "policy-validate"],
)
def test_invalid_utf8_on_stdin_is_one_clear_line(args: list[str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        subprocess.run(
            [sys.executable, "-c", _CLI, "init", "--home", str(home)], capture_output=True
        ).returncode
        == 0
    )
    done = _rensei(args, BAD_UTF8, home)
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr
    (line,) = stderr.strip().splitlines()
    assert "<stdin>" in line and "not UTF-8" in line and "0xff" in line
    assert done.stdout == b""
    history = _rensei(["policy", "history", "--json"], b"", home)
    assert json.loads(history.stdout) == []  # nothing saved


def test_invalid_utf8_in_a_file_is_one_clear_line(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(BAD_UTF8)
    result = runner.invoke(cli, ["explain-batch", str(bad)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "bad.jsonl" in result.stderr and "not UTF-8" in result.stderr


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c"])
def test_json_lines_keep_line_separators_inside_strings(
    runner: CliRunner, tmp_path: Path, separator: str
) -> None:
    principal = f"implementer{separator}on-call"
    doc = {"repo": "acme/widgets", "principal_id": principal}
    batch = tmp_path / "b.jsonl"
    # ensure_ascii=False writes the separator raw, which JSON allows inside a string
    text = json.dumps(doc, ensure_ascii=False) + "\r\n\n" + json.dumps({"repo": "a/b"}) + "\n"
    batch.write_text(text, encoding="utf-8", newline="")
    result = runner.invoke(cli, ["explain-batch", str(batch)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["explanation"]["context"]["principal_id"] == principal


def test_a_line_of_only_a_unicode_separator_is_not_blank(runner: CliRunner, tmp_path: Path) -> None:
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"repo": "a/b"}\n\u2028\n', encoding="utf-8")
    result = runner.invoke(cli, ["explain-batch", str(batch)])
    assert result.exit_code == 1 and result.stdout == ""
    assert "b.jsonl:2" in result.stderr
