"""HydraFlow policies in (issue 20 §2): ``policy import --format hydraflow`` checks the
``policies.json`` content hash by HydraFlow's order-independent rule (fixtures written by
tests/hydraflow_ref.py, from SEMANTICS.md only), refuses a ``corrupt`` store or an invalid set
with nothing written, and otherwise saves the next revision through the validated save."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli

from . import hydraflow_ref as ref

SAMPLES = Path(__file__).resolve().parent.parent / "plugins" / "rensei-seams-hydraflow" / "samples"


def _policies() -> list[dict[str, Any]]:
    doc = json.loads((SAMPLES / "policies.json").read_text())
    return list(doc["policies"])


def _history(runner: CliRunner) -> list[Any]:
    done = runner.invoke(cli, ["policy", "history", "--json"])
    assert done.exit_code == 0, done.output
    return list(json.loads(done.stdout))


@pytest.fixture(autouse=True)
def _home(runner: CliRunner) -> None:
    assert runner.invoke(cli, ["init"]).exit_code == 0


def test_a_hydraflow_store_becomes_our_next_revision(runner: CliRunner, tmp_path: Path) -> None:
    src = tmp_path / "policies.json"
    src.write_text(ref.policy_store(_policies(), revision=41))
    done = runner.invoke(cli, ["policy", "import", str(src), "--format", "hydraflow", "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert (doc["revision"], doc["policy_count"], doc["hydraflow_revision"]) == (
        1,
        len(_policies()),
        41,
    )
    assert doc["hydraflow_content_hash"] == json.loads(src.read_text())["content_hash"]
    saved = runner.invoke(cli, ["policy", "save", str(SAMPLES / "policies.json"), "--json"])
    assert json.loads(saved.stdout)["content_hash"] == doc["content_hash"]  # the same set
    # the hash is order-independent: the same policies shuffled import too
    shuffled = _policies()
    random.Random(3).shuffle(shuffled)
    src.write_text(ref.policy_store(shuffled, revision=42))
    assert json.loads(src.read_text())["content_hash"] == doc["hydraflow_content_hash"]
    again = runner.invoke(cli, ["policy", "import", str(src), "--format", "hydraflow"])
    assert again.exit_code == 0, again.output
    assert again.stderr.startswith(f"saved revision 3: {len(_policies())} policies")
    assert [r["revision"] for r in _history(runner)] == [1, 2, 3]


def _corrupt_texts() -> dict[str, str]:
    good = json.loads(ref.policy_store(_policies()))
    edited = json.loads(json.dumps(good))
    edited["policies"][0]["priority"] = 99  # an edit the stored hash does not cover
    return {
        "hash-mismatch": json.dumps(edited),
        "unparseable": ref.policy_store(_policies())[:-20],
        "policies-not-a-list": json.dumps({**good, "policies": {"a": 1}}),
        "revision-a-string": json.dumps({**good, "revision": "7"}),
        "hash-not-a-string": json.dumps({**good, "content_hash": 7}),
        "missing-key": json.dumps({k: v for k, v in good.items() if k != "revision"}),
        "not-utf8": ref.policy_store(_policies()).replace("z.ai", "z\udcff", 1),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_texts()))
def test_a_corrupt_store_is_refused_and_nothing_is_saved(
    runner: CliRunner, tmp_path: Path, case: str
) -> None:
    src = tmp_path / "policies.json"
    src.write_bytes(_corrupt_texts()[case].encode("utf-8", "surrogateescape"))
    done = runner.invoke(cli, ["policy", "import", str(src), "--format", "hydraflow"])
    assert done.exit_code == 1, done.output
    assert "Traceback" not in done.output
    errors = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "corrupt HydraFlow policy store" in errors[0], done.stderr
    assert _history(runner) == []


def test_an_invalid_set_is_refused_by_the_validated_save(runner: CliRunner, tmp_path: Path) -> None:
    policies = _policies()
    policies.append({**policies[0]})  # a duplicate id: a well-formed store, an invalid set
    src = tmp_path / "policies.json"
    src.write_text(ref.policy_store(policies))
    done = runner.invoke(cli, ["policy", "import", str(src), "--format", "hydraflow"])
    assert done.exit_code == 1
    assert "duplicate-policy-id" in done.stderr
    assert "nothing was saved" in done.stderr
    assert _history(runner) == []
