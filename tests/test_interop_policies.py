"""HydraFlow policies in and out (issue 20 §2, issue 29's first divergence): ``policy import
--format hydraflow`` reads a ``policies.json`` written the way HydraFlow's routing store writes it
(tests/hydraflow_ref.py, from HydraFlow's models: every field dumped, a mapping's model spelled
``effective_model``), checks its order-independent content hash, refuses a ``corrupt`` store or
an invalid set with nothing written, and otherwise saves the next revision through the validated
save; ``policy export --format hydraflow`` writes a revision back in HydraFlow's spelling, which
HydraFlow's loader accepts."""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli

from . import hydraflow_ref as ref

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _policies() -> list[dict[str, Any]]:
    return copy.deepcopy(ref.SAMPLE_POLICIES)


def _history(runner: CliRunner) -> list[Any]:
    done = runner.invoke(cli, ["policy", "history", "--json"])
    assert done.exit_code == 0, done.output
    return list(json.loads(done.stdout))


def _import(runner: CliRunner, src: Path, *more: str) -> Result:
    return runner.invoke(cli, ["policy", "import", str(src), "--format", "hydraflow", *more])


@pytest.fixture(autouse=True)
def _home(runner: CliRunner) -> None:
    assert runner.invoke(cli, ["init"]).exit_code == 0


def test_a_store_written_the_way_hydraflow_writes_it_imports(
    runner: CliRunner, tmp_path: Path
) -> None:
    src = tmp_path / "policies.json"
    src.write_text(ref.policy_store(_policies(), revision=41))
    text = src.read_text()
    assert '"effective_model": "glm-5.3"' in text and '"model"' not in text
    assert not text.endswith("\n")  # written as HydraFlow's store writes it
    assert ref.load_store(text)[0] == "ok"
    done = _import(runner, src, "--json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert (doc["revision"], doc["policy_count"], doc["hydraflow_revision"]) == (1, 4, 41)
    assert doc["hydraflow_content_hash"] == json.loads(text)["content_hash"]
    shown = json.loads(runner.invoke(cli, ["policy", "show", "--json"]).stdout)
    by_id = {pol["id"]: pol for pol in shown["policies"]}
    assert by_id["zai-pinned-loops"]["action"]["requirement_map"] == [
        {"requirement": {"kind": "capability", "value": "balanced"}, "model": "glm-4.6"},
        {"requirement": {"kind": "capability", "value": "high-reasoning"}, "model": "glm-5.3"},
    ]
    assert by_id["acme-widgets-implementers"]["enabled"] is False
    assert by_id["client-repos-anthropic"]["action"]["on_unavailable"] == "reject"
    # the hash is order-independent: the same policies shuffled import too
    shuffled = _policies()
    random.Random(3).shuffle(shuffled)
    src.write_text(ref.policy_store(shuffled, revision=42))
    assert json.loads(src.read_text())["content_hash"] == doc["hydraflow_content_hash"]
    again = _import(runner, src)
    assert again.exit_code == 0, again.output
    assert again.stderr.startswith("saved revision 2: 4 policies")
    assert [r["revision"] for r in _history(runner)] == [1, 2]
    assert _history(runner)[1]["content_hash"] == doc["content_hash"]  # the same set


def test_the_hash_covers_every_field_as_hydraflow_dumps_it(
    runner: CliRunner, tmp_path: Path
) -> None:
    """HydraFlow hashes its model's dump, absent fields at their defaults: a store that leaves
    defaults out hashes as the full dump does, and one hashed over its short form is corrupt."""
    short = {"id": "one", "action": {"provider_lock": "anthropic"}}
    full = ref.dump_policy(short)
    doc = {
        "content_hash": ref.policy_hash([full]),
        "policies": [short],
        "revision": 3,
        "schema_version": 1,
    }
    src = tmp_path / "short.json"
    src.write_text(json.dumps(doc))
    assert _import(runner, src).exit_code == 0
    doc["content_hash"] = ref.sha(json.dumps(short, sort_keys=True, separators=(",", ":")))
    src.write_text(json.dumps(doc))
    refused = _import(runner, src)
    assert refused.exit_code == 1 and "does not match its policies" in refused.stderr
    assert len(_history(runner)) == 1


def _foreign(field: str) -> str:
    """A store whose first policy carries what HydraFlow's model refuses, its hash recomputed
    over the file's own objects (so only the field is wrong)."""
    doc = json.loads(ref.policy_store(_policies()))
    pol = doc["policies"][0]
    if field == "model":  # our spelling of a mapping: the old fixture wrote it
        mapping = pol["action"]["requirement_map"][0]
        mapping["model"] = mapping.pop("effective_model")
    else:
        pol["description"] = "ours, not HydraFlow's"
    doc["content_hash"] = ref.policy_hash(doc["policies"])
    return json.dumps(doc, indent=2, sort_keys=True)


@pytest.mark.parametrize("field", ["model", "description"])
def test_a_field_hydraflows_model_does_not_have_is_refused(
    runner: CliRunner, tmp_path: Path, field: str
) -> None:
    src = tmp_path / "policies.json"
    src.write_text(_foreign(field))
    assert ref.load_store(src.read_text())[0] == "corrupt"  # HydraFlow refuses it as well
    done = _import(runner, src)
    assert done.exit_code == 1, done.output
    assert "Traceback" not in done.output
    errors = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    assert len(errors) == 1 and "corrupt HydraFlow policy store" in errors[0], done.stderr
    assert (field == "model") == ("spells the mapped model effective_model" in errors[0])
    assert _history(runner) == []


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
        "not-utf8": ref.policy_store(_policies()).replace("glm-4.6", "glm\udcff", 1),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_texts()))
def test_a_corrupt_store_is_refused_and_nothing_is_saved(
    runner: CliRunner, tmp_path: Path, case: str
) -> None:
    src = tmp_path / "policies.json"
    src.write_bytes(_corrupt_texts()[case].encode("utf-8", "surrogateescape"))
    done = _import(runner, src)
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
    done = _import(runner, src)
    assert done.exit_code == 1
    assert "duplicate-policy-id" in done.stderr
    assert "nothing was saved" in done.stderr
    assert _history(runner) == []


def test_export_writes_what_hydraflow_writes_and_loads(runner: CliRunner, tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    src.write_text(ref.policy_store(_policies(), revision=41))
    assert _import(runner, src).exit_code == 0
    out = tmp_path / "out.json"
    done = runner.invoke(cli, ["policy", "export", str(out), "--format", "hydraflow"])
    assert done.exit_code == 0, done.output
    text = out.read_text()
    state, dumped = ref.load_store(text)
    assert state == "ok"
    doc = json.loads(text)
    assert doc["revision"] == 1 and doc["schema_version"] == 1
    # HydraFlow's hash of the exported set is the source's: the same policies, every field,
    # spelled alike, each list in the same order
    assert doc["content_hash"] == json.loads(src.read_text())["content_hash"]
    assert sorted(dumped, key=lambda p: p["id"]) == sorted(
        [ref.dump_policy(p) for p in _policies()], key=lambda p: p["id"]
    )
    assert text == ref.policy_store(doc["policies"], revision=1)  # byte for byte
    # and it imports back as the same set
    assert _import(runner, out).exit_code == 0
    history = _history(runner)
    assert history[0]["content_hash"] == history[1]["content_hash"]


def test_export_of_our_policies_leaves_descriptions_out(runner: CliRunner, tmp_path: Path) -> None:
    assert runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json")]).exit_code == 0
    out = tmp_path / "out.json"
    done = runner.invoke(cli, ["policy", "export", str(out), "--format", "hydraflow"])
    assert done.exit_code == 0, done.output
    assert "description(s) left out" in done.stderr
    state, dumped = ref.load_store(out.read_text())
    assert state == "ok" and all("description" not in p for p in dumped)
    mapped = [m for p in dumped for m in p["action"]["requirement_map"]]
    assert mapped and all(set(m) == {"requirement", "effective_model"} for m in mapped)


def test_export_refuses_without_a_revision_or_into_the_home(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    empty = runner.invoke(cli, ["policy", "export", str(out), "--format", "hydraflow"])
    assert empty.exit_code == 1 and empty.stderr.startswith("Error: no policy revision")
    assert not out.exists()
    assert runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json")]).exit_code == 0
    db = Path(os.environ["RENSEI_HOME"]) / "rensei.db"  # the home conftest points at
    before = db.read_bytes()
    into = runner.invoke(cli, ["policy", "export", str(db), "--format", "hydraflow"])
    assert into.exit_code == 1 and "part of the home" in into.stderr
    assert db.read_bytes() == before
