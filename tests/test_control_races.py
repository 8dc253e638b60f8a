"""Control-side races from several processes: ``snapshot compile`` against ``org load`` and
``policy save`` (issue 19 #5). Invariant: revision n+1 is built from data at least as new as
revision n's, so the policy and org-data revisions recorded in each snapshot never decrease with
the snapshot revision, and a revoked grant never comes back in a later revision.

The deterministic race: a compile whose plugin validator (run after the inputs are read, before
the revision is published) runs an ``org load`` / ``policy save`` and a second compile to the
end. Read before the transaction, the gated compile then publishes a newer revision built from
older data; read inside it, the interfering writers find the home locked (a short busy timeout)
and fail, and the gated compile's revision is the newest data there is.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from rensei_routing.store.home import Home

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rensei_routing" / "examples"
RENSEI = [sys.executable, "-m", "rensei_routing.cli"]

#: A compile whose validator runs ``argv[2:]`` (as commands separated by ``--and``) from inside
#: the race window, with the home's busy timeout set short for them.
_GATED = """
import subprocess, sys
from datetime import datetime, timezone
from pathlib import Path
from rensei_routing.control.snapshots import compile_snapshot
from rensei_routing.core.audit.chain import format_timestamp
from rensei_routing.core.snapshot.validators import SnapshotValidator
from rensei_routing.store.home import Home

home = Home(Path(sys.argv[1]))
commands, current = [], []
for word in sys.argv[2:]:
    if word == "--and":
        commands.append(current)
        current = []
    else:
        current.append(word)
commands.append(current)

def gate(sections):
    home.config_path.write_text("[store]\\nbusy_timeout = 0.2\\n")
    try:
        for command in commands:
            subprocess.run(command, check=False, capture_output=True)
    finally:
        home.config_path.unlink()
    return []

result = compile_snapshot(
    home,
    compiled_at=format_timestamp(datetime.now(timezone.utc)),
    validators=[SnapshotValidator(name="race-gate", check=gate)],
)
print(result.snapshot.revision)
"""

#: One worker of the seeded stress: ``argv[3]`` is a JSON list of operations, run in order
#: once ``argv[2]`` (the start line) exists.
_WORKER = """
import json, subprocess, sys, time
from pathlib import Path
home, start, ops = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
for _ in range(2_000):  # bounded wait for the start line
    if start.exists():
        break
    time.sleep(0.005)
for op in ops:
    subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", *op, "--home", home],
        check=False, capture_output=True,
    )
"""


def _rensei(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RENSEI, *args], capture_output=True, text=True, check=False)


def _built_from(home: Path) -> list[tuple[int, int, int]]:
    with closing(Home(home).connect()) as conn:
        rows = conn.execute(
            "SELECT revision, policy_revision, org_revision FROM ruleset_snapshots "
            "ORDER BY revision"
        ).fetchall()
    return [(int(r), int(p), int(o)) for r, p, o in rows]


def _assert_monotonic(rows: list[tuple[int, int, int]]) -> None:
    for (rev, pol, org), (rev2, pol2, org2) in itertools.pairwise(rows):
        assert rev2 == rev + 1
        assert pol2 >= pol and org2 >= org, (
            f"revision {rev2} was built from (policy {pol2}, org {org2}), older than revision "
            f"{rev}'s (policy {pol}, org {org})"
        )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "c"
    for args in (
        ("init", "--org", "org_a1b2c3"),
        ("policy", "save", str(EXAMPLES / "policies.json")),
        ("org", "load", str(EXAMPLES / "org.json")),
    ):
        done = _rensei(*args, "--home", str(path))
        assert done.returncode == 0, done.stderr
    return path


def _revoked_org(tmp_path: Path) -> Path:
    """The example org with the ``gpu-heavy`` grant revoked."""
    org = json.loads((EXAMPLES / "org.json").read_text())
    grants = org["capacityProfiles"]["grants"]
    org["capacityProfiles"]["grants"] = [g for g in grants if g["profileId"] != "gpu-heavy"]
    path = tmp_path / "revoked.json"
    path.write_text(json.dumps(org))
    return path


@pytest.mark.parametrize("writer", ["org", "policy"])
def test_a_compile_racing_a_write_never_publishes_older_data(
    home: Path, tmp_path: Path, writer: str
) -> None:
    if writer == "org":
        write = [*RENSEI, "org", "load", str(_revoked_org(tmp_path)), "--home", str(home)]
    else:
        policies = json.loads((EXAMPLES / "policies.json").read_text())
        policies["policies"] = policies["policies"][:1]
        changed = tmp_path / "policies.json"
        changed.write_text(json.dumps(policies))
        write = [*RENSEI, "policy", "save", str(changed), "--home", str(home)]
    compile_ = [*RENSEI, "snapshot", "compile", "--home", str(home)]
    gated = subprocess.run(
        [sys.executable, "-c", _GATED, str(home), *write, "--and", *compile_],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""},
    )
    assert gated.returncode == 0, gated.stderr
    _assert_monotonic(_built_from(home))
    # Whatever the interleaving did, the writers can run now, and the next compile holds the
    # newest data (the revoked grant stays revoked).
    assert subprocess.run(write, capture_output=True, check=False).returncode == 0
    assert subprocess.run(compile_, capture_output=True, check=False).returncode == 0
    rows = _built_from(home)
    _assert_monotonic(rows)
    if writer == "org":
        shown = _rensei("snapshot", "show", "--json", "--home", str(home))
        assert shown.returncode == 0, shown.stderr
        grants = json.loads(shown.stdout)["sections"]["capacityProfiles"]["grants"]
        assert [g["id"] for g in grants] == ["general.all"]  # the revoked grant did not come back


def test_seeded_writers_and_compilers_keep_revisions_monotonic(home: Path, tmp_path: Path) -> None:
    rng = random.Random(1905)
    revoked = str(_revoked_org(tmp_path))
    orgs = [revoked, str(EXAMPLES / "org.json")]

    def op(kind: str) -> list[str]:
        if kind == "compile":
            return ["snapshot", "compile"]
        if kind == "org":
            return ["org", "load", rng.choice(orgs)]
        return ["policy", "save", str(EXAMPLES / "policies.json")]

    start = tmp_path / "start"
    plans = [
        [op(rng.choice(["compile", "compile", "org"])) for _ in range(6)],
        [op(rng.choice(["compile", "compile", "policy"])) for _ in range(6)],
        [op(rng.choice(["org", "policy", "compile"])) for _ in range(6)],
    ]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(home), str(start), json.dumps(plan)],
            env={**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""},
        )
        for plan in plans
    ]
    start.touch()
    for worker in workers:
        assert worker.wait(timeout=300) == 0
    rows = _built_from(home)
    assert rows  # at least one compile published
    _assert_monotonic(rows)


def test_the_store_refuses_inputs_older_than_the_latest_snapshot(home: Path) -> None:
    from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
    from rensei_routing.core.snapshot.org import OrgData
    from rensei_routing.errors import SnapshotError
    from rensei_routing.store.policies import PolicyStore
    from rensei_routing.store.snapshots import SnapshotStore, seal_next, validated_sections

    assert _rensei("snapshot", "compile", "--home", str(home)).returncode == 0
    before = _built_from(home)
    h = Home(home)
    key = h.private_key()
    with closing(h.connect(write=True)) as conn:
        loaded = PolicyStore(conn).load()
        snapshots = SnapshotStore(conn, org_id=h.info().org)
        sections, results = validated_sections(
            policies=loaded.snapshot,
            policy_state=loaded.state,
            org=OrgData(),
            validators=(),
            vocabulary=DEFAULT_VOCABULARY,
        )
        with pytest.raises(SnapshotError, match="the data moved"):
            seal_next(
                org_id=h.info().org,
                revision=snapshots.next_revision(),
                built_from=snapshots.compiled_from(),
                policy_revision=loaded.snapshot.revision,
                org_revision=0,  # older than the org revision 1 the latest was built from
                compiled_at="2030-01-01T00:00:00.000000Z",
                sections=sections,
                results=results,
                signing_key_id=key.public_key.key_id,
                sign=key.sign,
            )
    assert _built_from(home) == before
