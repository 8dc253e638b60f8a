"""One number format in human text: counts are thousands separated (``3,000 records``, as
quickstart, ``audit verify`` and doctor print them), identifiers (seqs, revisions) plain.
``audit checkpoint -o`` said ``checkpoint of 3000 records`` beside verify's ``3,000 records``;
the byte counts of ``snapshot export`` and ``snapshot history`` were bare too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"

#: What may carry four or more bare digits: hashes, timestamps, ids, file names.
_NOT_COUNTS = re.compile(
    r"sha256:[0-9a-f]+|[0-9a-f]{16,}|\d{4}-\d\d-\d\dT[\d:.]+Z|@\d+|seqs? [\d.]+|/\S*"
)


def _bare_numbers(text: str) -> list[str]:
    return re.findall(r"(?<![\d,])\d{4,}(?![\d,])", _NOT_COUNTS.sub("", text))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A control home with 1,001 recorded decisions after its policy save's record (1,002 records)
    and one compiled snapshot."""
    base = tmp_path_factory.mktemp("thousands")
    home = base / "h"
    contexts = (EXAMPLES / "contexts.jsonl").read_text().splitlines()
    batch = base / "contexts.jsonl"
    batch.write_text("\n".join((contexts * 200)[:1001]) + "\n")
    runner = CliRunner()
    for argv in (
        ["init", "--org", "acme"],
        ["org", "load", str(EXAMPLES / "org.json")],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["snapshot", "compile"],
        ["explain-batch", "--record", str(batch)],
    ):
        done = runner.invoke(cli, [*argv, "--home", str(home)])
        assert done.exit_code == 0, done.output
    return home


def test_checkpoint_counts_its_records_as_verify_does(home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["audit", "checkpoint", "-o", str(tmp_path / "cp"), "--home", home])
    assert done.exit_code == 0, done.output
    assert done.stderr.startswith("checkpoint of 1,002 records (sha256:"), done.stderr
    verified = runner.invoke(cli, ["audit", "verify", "--home", str(home)])
    assert "intact: 1,002 records" in verified.stdout, verified.stdout
    for text in (done.stderr, verified.stdout):
        assert _bare_numbers(text) == [], text


def test_snapshot_byte_counts_are_separated(home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "s.json"
    exported = runner.invoke(cli, ["snapshot", "export", str(target), "--home", str(home)])
    assert exported.exit_code == 0, exported.output
    size = target.stat().st_size
    assert size >= 1000  # the example org's snapshot: a count that needs a separator
    assert exported.stderr.strip().endswith(f"({size:,} bytes)"), exported.stderr
    history = runner.invoke(cli, ["snapshot", "history", "--home", str(home)])
    assert history.stdout.rstrip().endswith(f"  {size:,} B"), history.stdout
    policies = runner.invoke(cli, ["policy", "history", "--home", str(home)])
    assert policies.exit_code == 0 and "\t" in policies.stdout, policies.output
    for text in (exported.stderr, history.stdout, policies.stdout):
        assert _bare_numbers(text) == [], text
