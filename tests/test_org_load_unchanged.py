"""Loading identical org data is a no-op that says so (issue 22, edge 14): no new revision, so
nothing to recompile (``serve`` recompiles when a revision moves); data that differs from the
current revision, even data an older revision held, is saved as the next one."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

import apsw
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.control.snapshots import is_stale, source_revisions
from rensei_routing.core.snapshot.org import OrgData
from rensei_routing.store.home import Home
from rensei_routing.store.snapshots import OrgStore

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _rows(home: Path) -> list[tuple[object, ...]]:
    conn = apsw.Connection(str(home / "rensei.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute("SELECT revision, content_hash, saved_at FROM org_data"))
    finally:
        conn.close()


def test_loading_identical_org_data_writes_nothing_and_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    at = ["--home", str(home)]
    assert _run("init", *at).exit_code == 0
    first = _run("org", "load", str(EXAMPLES / "org.json"), *at)
    assert first.exit_code == 0 and first.stderr.startswith("saved org data revision 1:")
    assert _run("snapshot", "compile", *at).exit_code == 0
    before = _rows(home)

    again = _run("org", "load", str(EXAMPLES / "org.json"), *at)
    assert (again.exit_code, again.stdout) == (0, "")
    assert again.stderr == (
        "org data unchanged: identical to revision 1; nothing saved, nothing to recompile\n"
    )
    assert _rows(home) == before  # no row, not even a new saved_at
    assert not is_stale(Home(home))  # serve has nothing to recompile
    assert source_revisions(Home(home))[1] == 1

    # the same data with its keys in another order is the same data
    shuffled = tmp_path / "shuffled.json"
    doc = json.loads((EXAMPLES / "org.json").read_text())
    shuffled.write_text(json.dumps(dict(reversed(list(doc.items())))))
    assert "unchanged" in _run("org", "load", str(shuffled), *at).stderr

    # different data is the next revision; going back to revision 1's data is revision 3
    changed = tmp_path / "changed.json"
    profiles = doc["capacityProfiles"]
    edited = {**profiles, "profiles": [{**profiles["profiles"][0], "name": "Renamed"}]}
    edited["profiles"] += profiles["profiles"][1:]
    changed.write_text(json.dumps({**doc, "capacityProfiles": edited}))
    assert _run("org", "load", str(changed), *at).stderr.startswith("saved org data revision 2:")
    assert is_stale(Home(home))
    back = _run("org", "load", str(EXAMPLES / "org.json"), *at)
    assert back.stderr.startswith("saved org data revision 3:")


def test_put_says_whether_it_created_a_revision(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    data = OrgData.from_dict(json.loads((EXAMPLES / "org.json").read_text()))
    with closing(home.connect(write=True)) as conn:
        store = OrgStore(conn)
        assert store.put(data, saved_at="2026-01-01T00:00:00Z") == (1, True)
        assert store.put(data, saved_at="2026-01-02T00:00:00Z") == (1, False)
        assert store.save(data, saved_at="2026-01-03T00:00:00Z") == 1
        assert store.load()[0] == 1
