"""The docs cannot drift: docs/cli.md is what the click commands say, every example of
docs/formats.md loads with the project's readers (signatures and hashes checked), the README's
two commands are what .ci/run runs, and every local link points at a file that exists."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.cli._reference import render_reference
from rensei_routing.core.archive import rows_from_lines
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.chain import note_key_hash, parse_checkpoint, verify_chain
from rensei_routing.core.context import RouteContext
from rensei_routing.core.org import OrgData
from rensei_routing.core.policy import PolicySnapshot
from rensei_routing.core.snapshot import verify_snapshot
from rensei_routing.core.spawn import Spawn, check_spawn
from rensei_routing.core.validation import validate_policies

from .shadow_support import registry

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
_EXAMPLE = re.compile(r"<!-- example: ([a-z-]+) -->\n```[a-z]*\n(.*?)\n```", re.S)


def _examples() -> dict[str, str]:
    found = _EXAMPLE.findall((DOCS / "formats.md").read_text("utf-8"))
    names = [n for n, _ in found]
    assert len(names) == len(set(names))
    return dict(found)


def test_the_cli_reference_is_current() -> None:
    assert (DOCS / "cli.md").read_text("utf-8") == render_reference(cli), (
        "docs/cli.md is stale: run python scripts/cli-reference"
    )


def test_the_cli_reference_covers_every_built_in_command() -> None:
    text = (DOCS / "cli.md").read_text("utf-8")
    for name in ("quickstart", "doctor", "backup", "restore", "audit export", "audit verify"):
        assert f"## `rensei {name}`" in text


def test_the_readme_commands_are_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    blocks = re.findall(r"```sh\n# [12]\. [^\n]*\n(?:#[^\n]*\n)*(.*?)\n```", readme, re.S)
    assert len(blocks) == 2
    ci = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    assert blocks[0] in ci and blocks[1] in ci
    assert ci[-1] == blocks[1]  # the suite's summary is the last line CI prints
    assert "rensei quickstart" in blocks[0]


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_local_links_resolve(doc: str) -> None:
    path = ROOT / doc if doc == "README.md" else DOCS / doc
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text("utf-8")):
        assert (path.parent / target).exists(), f"{doc} links to missing {target}"


def _key() -> signing.PublicKey:
    return signing.PublicKey.from_text(_examples()["public-key"].strip())


def _load(name: str) -> Any:
    return json.loads(_examples()[name])


def test_policy_example() -> None:
    snapshot = PolicySnapshot.from_dict([_load("policy")])
    assert not validate_policies(snapshot.policies)


def test_context_example() -> None:
    assert RouteContext.from_dict(_load("context")).principal_id == "implementer"


def test_org_example_is_the_shipped_file() -> None:
    doc = _load("org")
    OrgData.from_dict(doc)
    shipped = ROOT / "rensei_routing" / "examples" / "org.json"
    assert doc == json.loads(shipped.read_text("utf-8"))


def test_spawn_example() -> None:
    spawn = Spawn.from_dict(_load("spawn"))
    check_spawn(spawn, seam=registry().get(spawn.seam))


def test_envelope_example_verifies() -> None:
    data = _examples()["envelope"].encode("utf-8")
    snap = verify_snapshot(data, lookup=signing.key_lookup([_key()]))
    assert snap.ruleset_rev == "example@1"
    other = signing.generate().public_key
    with pytest.raises(Exception, match="key"):
        verify_snapshot(data, lookup=signing.key_lookup([other]))


def _record_row() -> tuple[Any, ...]:
    r = _load("record")
    fields = (r["seq"], r["recorded_at"], r["prev_hash"], r["payload_hash"], r["record_hash"])
    return (*fields, canonical_bytes(r["payload"]))


def test_record_and_export_line_examples_verify() -> None:
    assert verify_chain([_record_row()])
    rows = list(rows_from_lines([_examples()["export-line"]]))
    assert rows == [_record_row()] and verify_chain(rows)


def test_checkpoint_example_signs_the_record() -> None:
    cp = parse_checkpoint(_examples()["checkpoint"] + "\n")
    key = _key()

    def signature_ok(c: Any) -> bool:
        sig = c.signature_by(c.origin, note_key_hash(c.origin, key.raw))
        return sig is not None and signing.check(key, c.body, sig)

    result = verify_chain([_record_row()], checkpoints=[cp], signature_ok=signature_ok)
    assert result and result.checkpoints_checked == 1
