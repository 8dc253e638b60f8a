"""The console's route-matrix page over real HTTP (`rensei ui` as a process): a revision's
cells, the blast radius between two revisions, escaped values, typed 400/404 pages for bad
input, GET only, and nothing written into the home."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .console_support import fetch, running_ui
from .test_console_readonly import tree

GLOBAL: dict[str, Any] = {
    "id": "global",
    "priority": 0,
    "match": {},
    "action": {
        "account_pool": ["primary"],
        "requirement_map": [
            {"requirement": {"kind": "capability", "value": "balanced"}, "model": "claude-x"}
        ],
    },
}
REVIEWERS: dict[str, Any] = {
    "id": "reviewers-zai",
    "priority": 10,
    "match": {"roles": ["reviewer"], "request_faces": ["agentic"]},
    "action": {"provider_lock": "zai-harness"},
}


def _home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    home.init()
    conn = home.connect(write=True)
    try:
        store = PolicyStore(conn)
        for policies in ([GLOBAL], [GLOBAL, REVIEWERS]):
            snapshot = PolicySnapshot.from_dict({"policies": policies})
            store.save(snapshot.policies, saved_at="2026-01-01T00:00:00.000000Z")
    finally:
        conn.close()
    conn = home.connect(write=False)  # the -wal a reader makes, before the tree is taken
    conn.close()
    return home


def _rows(body: bytes, table_id: str) -> list[str]:
    found = re.search(rb'<table id="' + table_id.encode() + rb'">(.*?)</table>', body, re.S)
    assert found, body[:500]
    return [r.decode() for r in re.findall(rb"<tr>(.*?)</tr>", found.group(1), re.S)][1:]


def test_the_matrix_page_and_the_blast_radius_page(tmp_path: Path) -> None:
    home = _home(tmp_path)
    before = tree(home.path)
    with running_ui(home.path, tmp_path / "ui.log") as base:
        status, body = fetch(base + "/")
        assert status == 200 and b'<a href="/matrix">Matrix</a>' in body  # in the nav
        status, body = fetch(base + "/matrix")
        assert status == 200, body[:300]
        assert b"Revision 2: 56 cells (52 selected, 4 held, 0 rejected, 0 unmanaged)" in body
        assert len(_rows(body, "matrix")) == 56
        assert b'href="/matrix?rev=2&amp;against=1"' in body
        status, body = fetch(base + "/matrix?rev=1&role=reviewer&face=agentic&repo_class=client")
        assert status == 200
        (row,) = _rows(body, "matrix")
        assert "<td>global</td>" in row and "selected" in row and "<td>claude-x</td>" in row
        status, body = fetch(base + "/matrix?rev=2&against=1")
        assert status == 200
        assert b"Blast radius: revision 1 \xe2\x86\x92 2" in body
        assert b"4 of 56 cells move (4 become held, 0 become rejected" in body
        rows = _rows(body, "radius")
        assert len(rows) == 4 and all("reviewer" in r and "<td>held</td>" in r for r in rows)
        status, body = fetch(base + "/matrix?rev=1&against=0&repo=acme/widgets")
        assert status == 200 and b"56 of 56 cells move" in body and b"unmanaged" in body
        status, body = fetch(base + "/matrix?rev=2&against=2")
        assert status == 200 and b'<p id="radius">No cell moves.</p>' in body
        # bad input: typed pages, values escaped, nothing run
        assert fetch(base + "/matrix?rev=9")[0] == 404
        assert fetch(base + "/matrix?against=9")[0] == 404
        assert fetch(base + "/matrix?rev=two")[0] == 400
        status, body = fetch(base + "/matrix?repo=%3Cscript%3E")
        assert status == 400 and b"&lt;script&gt;" in body and b"<script" not in body
        status, body = fetch(base + "/matrix?role=pilot")
        assert status == 400 and b"unknown role" in body
        assert fetch(base + "/matrix?face=sideways")[0] == 400
        assert fetch(base + "/matrix?requirement=hgh-reasoning")[0] == 400
        for method in ("POST", "PUT", "DELETE"):
            assert fetch(base + "/matrix", method=method)[0] == 405
    assert tree(home.path) == before  # the console wrote nothing


def test_a_corrupt_revision_is_a_page_saying_so(tmp_path: Path) -> None:
    home = _home(tmp_path)
    conn = home.connect(write=True)
    try:
        conn.execute(
            "UPDATE policy_revisions SET body = CAST('{not json' AS BLOB) WHERE revision = 1"
        )
    finally:
        conn.close()
    with running_ui(home.path, tmp_path / "ui.log") as base:
        assert fetch(base + "/matrix")[0] == 200  # revision 2 is fine
        status, body = fetch(base + "/matrix?rev=2&against=1")
        assert status == 503 and b"revision 1 is corrupt" in body
