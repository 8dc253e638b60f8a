"""The console's enforcement page over real HTTP on 127.0.0.1 (the console's own app and
listener): every canary with its state, pinned revision (and the current one when it is ahead),
the gate verdict the arm rests on, an override's actor and reason, the trip rule and why a
canary tripped; values escaped; the loopback Host rule; and nothing written into the home."""

from __future__ import annotations

import datetime as dt
import re
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from rensei_routing.core.enforce.gate import GateBar
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.enforce import EnforcementRefused, Enforcer, arm
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .shadow_support import home_with_policies, registry, spawn
from .test_console_guard import _digest, request, serving

STAMP = "2026-02-03T04:05:06.000007Z"
ANTHROPIC = [{"account_id": "anthropic-primary", "provider_binding": "anthropic"}]
KEEP: dict[str, Any] = {
    "policies": [
        {
            "id": "on-anthropic",
            "priority": 10,
            "match": {"repo_ids": ["acme/widgets", "acme/gadgets"]},
            "action": {"provider_lock": "anthropic"},
        }
    ]
}
#: Revision 2: acme/gadgets locked to a provider none of its accounts serves (held).
HOLD_GADGETS: dict[str, Any] = {
    "policies": [
        KEEP["policies"][0] | {"match": {"repo_ids": ["acme/widgets"]}},
        {
            "id": "gadgets-on-zai",
            "priority": 10,
            "match": {"repo_ids": ["acme/gadgets"]},
            "action": {"provider_lock": "zai-harness", "on_unavailable": "hold"},
        },
    ]
}


def _gateway(repo: str) -> Spawn:
    return Spawn.from_dict(
        spawn(
            repo=repo, stages=[{"mechanism": "default", "provider": "gateway"}], accounts=ANTHROPIC
        )
    )


def _save(home: Home, policies: dict[str, Any]) -> None:
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(PolicySnapshot.from_dict(policies).policies, saved_at=STAMP)


def _home(tmp_path: Path) -> Home:
    """acme/widgets armed on revision 1 by its gate, revision 3 saved since (ahead); acme/gadgets
    armed on revision 2 over its failing gate (override) and tripped by its refusals."""
    home = home_with_policies(tmp_path, KEEP)
    now = dt.datetime.now(dt.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with ShadowRecorder(home, registry(), clock=lambda: stamp) as rec:
        rec.record_many([_gateway("acme/widgets")] * 5 + [_gateway("acme/gadgets")] * 5)
    bar = GateBar(min_samples=5)
    arm(home, "acme/widgets", now=now, actor="ops@acme", bar=bar)
    _save(home, HOLD_GADGETS)
    arm(
        home,
        "acme/gadgets",
        now=now,
        actor="<b>mallory</b>",
        bar=bar,
        override=True,
        reason="rehearse <script>x</script> a hold",
        trip_rate=0.05,
        trip_window_s=600,
    )
    later = (now + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with Enforcer(home, registry(), clock=lambda: later) as enforcer:
        codes = []
        for _ in range(2):
            with pytest.raises(EnforcementRefused) as e:
                enforcer.enforce(_gateway("acme/gadgets"))
            codes.append(e.value.code)
    assert codes == ["held", "tripped"]
    _save(home, HOLD_GADGETS | {"policies": HOLD_GADGETS["policies"][:1]})
    conn = home.connect(write=False)  # the -wal a reader makes, before the digest is taken
    conn.close()
    return home


def _rows(body: bytes) -> dict[str, str]:
    found = re.search(rb'<table id="canaries">(.*?)</table>', body, re.S)
    assert found, body[:800]
    rows = [r.decode() for r in re.findall(rb"<tr>(.*?)</tr>", found.group(1), re.S)][1:]
    return {re.search(r"<td>([^<]*)</td>", r).group(1): r for r in rows}  # type: ignore[union-attr]


def test_the_enforcement_page_shows_each_canary(tmp_path: Path) -> None:
    home = _home(tmp_path)
    before = _digest(home)
    with serving(home) as (port, _):
        host = {"Host": f"127.0.0.1:{port}"}
        status, _, body = request(port, "/", host)
        assert status == 200 and b'<a href="/enforce">Enforcement</a>' in body
        status, _, body = request(port, "/enforce", host)
        assert status == 200, body[:500]
        assert b'<p id="enforce-summary">1 armed: acme/widgets.</p>' in body
        rows = _rows(body)
        assert list(rows) == ["acme/widgets", "acme/gadgets"]  # armed first
        widgets, gadgets = rows["acme/widgets"], rows["acme/gadgets"]
        assert '<span class="state-armed">armed</span>' in widgets
        assert '1 <span class="ahead">(current 3 is ahead: arm again to gate it)</span>' in widgets
        assert re.search(r'class="verdict">pass: 5 spawns, revision 1</a>', widgets)
        assert '<span class="state-tripped">tripped</span>' in gadgets
        assert "2 <span" in gadgets  # pinned 2, current 3 ahead of it too
        assert re.search(r'class="verdict">fail \([^)]*\): 5 spawns, revision 2</a>', gadgets)
        assert "5.0% in 10m00s" in gadgets
        assert "refusal-rate at " in gadgets and "2 refused of 2 decisions" in gadgets
        # markup from the store shows as text
        assert "by &lt;b&gt;mallory&lt;/b&gt;: rehearse &lt;script&gt;x&lt;/script&gt; a hold" in (
            gadgets
        )
        assert b"<script>" not in body and b"<b>mallory" not in body
        # another Host name is refused before any page is read
        status, _, _ = request(port, "/enforce", {"Host": f"rebound.example:{port}"})
        assert status == 421
    assert _digest(home) == before, "the console wrote into the home"


def test_a_home_never_armed_says_so(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path, KEEP)
    before = _digest(home)
    with serving(home) as (port, _):
        status, _, body = request(port, "/enforce", {"Host": f"127.0.0.1:{port}"})
    assert status == 200
    assert b"Nothing is armed: every spawn runs as it would without enforcement." in body
    assert b'<p id="canaries">No canary was ever armed in this home.</p>' in body
    assert _digest(home) == before
    assert not (home.path / "enforce.state").exists()
