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
from rensei_routing.cli._root import BUILTIN, load_all_builtins
from rensei_routing.core.audit.archive import rows_from_lines
from rensei_routing.core.audit.chain import note_key_hash, parse_checkpoint, verify_chain
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.routing.validation import validate_policies
from rensei_routing.core.shadow.spawn import Spawn, check_spawn
from rensei_routing.core.snapshot.envelope import verify_snapshot
from rensei_routing.core.snapshot.org import OrgData

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


def test_the_lazy_command_table_matches_the_commands() -> None:
    load_all_builtins()
    for name, (modules, short) in BUILTIN.items():
        command = cli.commands[name]
        assert command.get_short_help_str(500) == short, name
        assert command.callback is not None
        assert command.callback.__module__ == f"rensei_routing.cli.{modules[0]}", name
    defined = {
        n
        for n, c in cli.commands.items()
        if (c.callback.__module__ or "").startswith("rensei_routing.cli.")
    }
    assert defined == set(BUILTIN)


def test_help_and_host_status_import_no_command_module_they_do_not_use() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from rensei_routing.cli import cli\n"
        "try:\n    cli(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = ('waitress', 'apsw', 'rensei_routing.store.audit',"
        " 'rensei_routing.core.routing.resolver',"
        " 'rensei_routing.cli.shadow', 'rensei_routing.cli.audit')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)"
    )
    for args in (["--help"], ["--no-plugins", "host", "status"]):
        done = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
        )
        assert done.stderr.strip().splitlines()[-1] == "[]", (args, done.stderr)


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


def test_every_test_the_docs_name_exists() -> None:
    """A doc that points at a test (``tests/x.py::test_y``) points at one that exists."""
    root = Path(__file__).resolve().parent.parent
    named = []
    for doc in sorted((root / "docs").glob("*.md")):
        for path, name in re.findall(r"(tests/[\w/]+\.py)::(\w+)", doc.read_text("utf-8")):
            named.append((doc.name, path, name))
    assert named, "no test is named in docs/"
    missing = [
        (doc, path, name)
        for doc, path, name in named
        if not (root / path).is_file()
        or not re.search(rf"^(def {name}\(|{name} = )", (root / path).read_text("utf-8"), re.M)
    ]
    assert missing == []
