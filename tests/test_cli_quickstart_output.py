"""What quickstart shows a new user (issue 22, edge 11): one explained decision (the headline
feature, exactly what ``explain --snapshot`` prints for the suggested context), an agreement
table that says its divergence columns are kinds of disagreement, no URL (the endpoint it served
on is gone once it exits), and every count written one way (thousands separated)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.cli._render import SPAN_LABEL

from .shadow_support import installed_seams

__all__ = ["installed_seams"]


@pytest.mark.usefixtures("installed_seams")
def test_quickstart_output_explains_a_decision_labels_its_table_and_prints_no_dead_url(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    home = tmp_path / "qs"
    done = runner.invoke(cli, ["quickstart", "--home", str(home)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    out = done.stdout
    lines = out.splitlines()

    # one decision, explained: the block is what `explain --snapshot` prints for the context
    # Explore next suggests (the ruleset line's age aside)
    start = next(i for i, x in enumerate(lines) if x.startswith("One decision, explained"))
    end = lines.index("", start)
    block = [x.removeprefix("  ") for x in lines[start + 1 : end]]
    suggested = next(x for x in lines if " explain --snapshot " in x)
    context = suggested.split("--snapshot ", 1)[1].strip("'")
    explained = runner.invoke(cli, ["--home", str(home), "explain", "--snapshot", context])
    assert explained.exit_code == 0

    def no_age(text: list[str]) -> list[str]:
        return [re.sub(r"age \w+\)", "age)", x) for x in text]

    assert no_age(block) == no_age(explained.stdout.splitlines())
    assert block[0].startswith("selected: ") and any(x.startswith("policies") for x in block)

    # the agreement table names its divergence columns as kinds of disagreement
    header = next(i for i, x in enumerate(lines) if x.startswith("mechanism "))
    span = lines[header - 1]
    assert SPAN_LABEL in span
    left, right = span.index("-"), span.rindex("-")
    assert lines[header][left:].startswith("provider")
    assert lines[header][: right + 1].endswith("not-selected")
    assert "each kind of disagreement" in lines[lines.index("", header) - 1]

    # no URL at all: the loopback endpoint it served on is stopped before it prints
    assert "http://" not in out and "https://" not in out

    # counts one way: every number of four or more digits is thousands-separated, except
    # identifiers (seq numbers, hashes, timestamps, decision ids)
    scrubbed = re.sub(
        r"sha256:[0-9a-f]+|\d{4}-\d\d-\d\dT[\d:.]+Z|seqs? [\d.]+|[0-9a-f]{12}->"
        r"[0-9a-f]{12}|quickstart@\d+",
        "",
        out,
    )
    assert re.findall(r"(?<![\d,.])\d{4,}", scrubbed) == []
    assert "intact: 3,000 records" in out
