"""The enforcement rehearsal, end to end, with real processes through the installed plugin's four
seams: a seam process (``seam_script.py``) asks the Enforcer, applies the route with the plugin's
hook and starts a real child; the operator runs the real ``rensei`` console script.

Shadow evidence is recorded; the gate says inconclusive, then pass; ``enforce arm``; spawns at
the four seams are enforced (the child's argv or request rewritten, each decision on the chain);
a revision that holds the repository's spawns, armed with ``--override --reason``, refuses a
spawn before any credential is read (no child starts) and trips; the trip shows in ``enforce
status``; arming the earlier revision again rolls back; ``enforce disarm``; the records and
answers after the disarm are byte-identical to a home never armed, run with the same clock.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from rensei_routing.core.enforce.records import enforced_view, lineage_of
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.shadow.compare import is_shadow_payload
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "seam_script.py"
RENSEI = Path(sys.executable).with_name("rensei")
REPO = "acme/widgets"
SAVED_AT = "2026-01-01T00:00:00.000000Z"
#: The four seams, each with the first stage it applies (the fleet ratchet then moves the spawn
#: onto the gateway, the governed transport).
SEAM_FIRST = {
    "agentic-runner": "default",
    "subprocess-runner": "default",
    "lightweight-agent": "maintenance-default",
    "streaming-agent": "maintenance-default",
}
ARGV = ["claude", "-p", "fix the failing test", "--model", "sonnet", "--verbose"]
ONE_SHOT = {"model": "sonnet", "prompt": "summarise the diff", "max_tokens": 512}
ENFORCED_MODEL = "claude-sonnet-4-5"

#: Revision 1: acme/widgets on Anthropic, a literal Sonnet request on a pinned Sonnet model.
SONNET_PINNED = {
    "policies": [
        {
            "id": "widgets-sonnet-pinned",
            "priority": 10,
            "match": {"repo_ids": [REPO]},
            "action": {
                "provider_lock": "anthropic",
                "requirement_map": [{"requirement": "claude-sonnet", "model": ENFORCED_MODEL}],
            },
        }
    ]
}
#: Revision 2: acme/widgets locked to a provider none of its accounts serves: every spawn held.
HOLDS = {
    "policies": [
        {
            "id": "widgets-on-zai",
            "priority": 10,
            "match": {"repo_ids": [REPO]},
            "action": {"provider_lock": "zai-harness", "on_unavailable": "hold"},
        }
    ]
}


def _home(path: Path) -> Home:
    home = Home(path)
    home.init()
    with closing(home.connect(write=True)) as conn:
        for policies in (SONNET_PINNED, HOLDS):
            snapshot = PolicySnapshot.from_dict(policies)
            PolicyStore(conn).save(snapshot.policies, saved_at=SAVED_AT)
    return home


def _save_rev1_only(path: Path) -> Home:
    home = Home(path)
    home.init()
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(PolicySnapshot.from_dict(SONNET_PINNED).policies, saved_at=SAVED_AT)
    return home


def _save_holds(home: Home) -> None:
    with closing(home.connect(write=True)) as conn:
        PolicyStore(conn).save(PolicySnapshot.from_dict(HOLDS).policies, saved_at=SAVED_AT)


def _spawn(seam: str) -> dict[str, Any]:
    return {
        "seam": seam,
        "principal_id": "implementer",
        "repo": REPO,
        "repo_class": "client",
        "accounts": [{"account_id": "anthropic-primary", "provider_binding": "anthropic"}],
        "stages": [
            {"mechanism": SEAM_FIRST[seam], "provider": "claude"},
            {"mechanism": "fleet-ratchet", "provider": "gateway"},
        ],
        "model": "sonnet",
        "account_id": "anthropic-primary",
    }


def _steps(credential: Path) -> list[dict[str, Any]]:
    """One spawn at each seam, each a millisecond after the last, from now."""
    start = dt.datetime.now(dt.UTC)
    return [
        {
            "at": format_timestamp(start + dt.timedelta(milliseconds=i)),
            "spawn": _spawn(seam),
            "request": ONE_SHOT if seam == "lightweight-agent" else ARGV,
            "credential": str(credential),
        }
        for i, seam in enumerate(SEAM_FIRST)
    ]


def _seams(home: Home, steps: list[dict[str, Any]], tmp: Path, tag: str) -> list[dict[str, Any]]:
    """Run the seam process over ``steps``; its events, in order."""
    steps_file, events = tmp / f"steps-{tag}.json", tmp / f"events-{tag}.jsonl"
    steps_file.write_text(json.dumps(steps), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(home.path), str(steps_file), str(events)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]


def _rensei(home: Home, *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(RENSEI) if RENSEI.exists() else shutil.which("rensei")
    assert exe, "the rensei console script is not installed"
    env = {**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": "hydraflow", "RENSEI_ACTOR": "ops@acme"}
    return subprocess.run(
        [exe, *args, "--home", str(home.path)], capture_output=True, text=True, env=env, check=False
    )


def _by_step(events: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(e["step"], []).append(e)
    return out


def _payloads(home: Home) -> list[tuple[int, bytes, Any]]:
    with AuditLog.open(home) as log:
        return [(r.seq, r.payload_bytes, r.payload) for r in log.records()]


def _expect_ran(events: list[dict[str, Any]], first: str, seam: str, model: str) -> None:
    """One step's events: ``first``, then the credential, then a child that saw ``model``."""
    assert [e["event"] for e in events] == [first, "credential", "child"]
    saw = events[2]["saw"]
    assert saw["credential"] is True
    if seam == "lightweight-agent":
        assert saw["request"] == {**ONE_SHOT, "model": model}
    else:
        argv = list(ARGV[1:])
        argv[argv.index("--model") + 1] = model
        assert saw["argv"] == argv


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
def test_the_rehearsal(tmp_path: Path) -> None:
    credential = tmp_path / "credential"
    credential.write_text("sk-rehearsal-not-a-real-key", encoding="utf-8")
    home = _save_rev1_only(tmp_path / "armed")
    gate = ("enforce", "gate", "--repo", REPO, "--min-samples", "8")

    # shadow evidence: four spawns, the gate is inconclusive (and its verdict is recorded)
    events = _seams(home, _steps(credential), tmp_path, "evidence-1")
    for i, seam in enumerate(SEAM_FIRST):
        _expect_ran(_by_step(events)[i], "not-governed", seam, "sonnet")
    done = _rensei(home, *gate)
    assert done.returncode == 1 and "inconclusive" in done.stdout, done.stdout + done.stderr
    assert done.stderr.strip().endswith("gate-inconclusive: acme/widgets would not be armed")
    # four more: it passes
    _seams(home, _steps(credential), tmp_path, "evidence-2")
    done = _rensei(home, *gate)
    assert done.returncode == 0 and ": pass: 8 spawns" in done.stdout, done.stdout + done.stderr
    verdicts = [p for _, _, p in _payloads(home) if p.get("record_type") == "enforce-gate"]
    assert [v["verdict"] for v in verdicts] == ["inconclusive", "pass"]

    # arm: the gate passes again and the canary pins revision 1
    done = _rensei(home, "enforce", "arm", "--repo", REPO, "--min-samples", "8")
    assert done.returncode == 0 and "armed acme/widgets on revision 1" in done.stdout, done.stderr
    events = _by_step(_seams(home, _steps(credential), tmp_path, "armed"))
    chain = {seq: payload for seq, _, payload in _payloads(home)}
    for i, seam in enumerate(SEAM_FIRST):
        _expect_ran(events[i], "enforced", seam, ENFORCED_MODEL)
        route = events[i][0]["route"]
        assert (route["kind"], route["revision"], route["model"]) == (
            "enforced",
            1,
            ENFORCED_MODEL,
        )
        record = chain[route["seq"]]
        assert record["record_type"] == "enforced-decision"
        assert enforced_view(record)["enforced"] is True
        assert (record["seam"], record["answer"]) == (seam, "enforced")
        assert lineage_of(record)["decision_id"] == route["decision_id"]
        assert enforced_view(record)["route"]["model"] == ENFORCED_MODEL

    # a revision that holds every spawn of the repository, armed over its failing gate
    _save_holds(home)
    done = _rensei(home, *gate)
    assert done.returncode == 1 and "fail" in done.stdout
    done = _rensei(
        home,
        *("enforce", "arm", "--repo", REPO, "--min-samples", "8", "--trip-rate", "0.05"),
        *("--override", "--reason", "rehearse a hold"),
    )
    assert done.returncode == 0, done.stderr
    assert "(pin moved from 1)" in done.stdout and "override" in done.stdout
    events = _by_step(_seams(home, _steps(credential), tmp_path, "holds"))
    # the first spawn is refused (held) before any credential: no child started
    assert [e["event"] for e in events[0]] == ["refused"] and events[0][0]["code"] == "held"
    # the second refusal passes the trip rate: refused as tripped, the canary disarms itself
    assert [e["event"] for e in events[1]] == ["refused"] and events[1][0]["code"] == "tripped"
    # the spawns after the trip run exactly as before enforcement
    for i in (2, 3):
        seam = list(SEAM_FIRST)[i]
        _expect_ran(events[i], "not-governed", seam, "sonnet")
        assert events[i][0]["reason"] == "nothing-armed"
    chain = {seq: payload for seq, _, payload in _payloads(home)}
    held = chain[events[0][0]["seq"]]
    held_route = enforced_view(held)["route"]
    assert (held["answer"], held_route, lineage_of(held)["revision"]) == ("held", None, 2)
    trips = [p for p in chain.values() if p.get("record_type") == "enforce-trip"]
    assert [(t["reason"], t["actor"], t["armed_by"]) for t in trips] == [
        ("refusal-rate", "enforcer", "ops@acme")
    ]
    done = _rensei(home, "enforce", "status")
    assert done.returncode == 0
    assert "acme/widgets: tripped, revision 2" in done.stdout
    assert "tripped: refusal-rate" in done.stdout
    (row,) = json.loads(_rensei(home, "enforce", "status", "--json").stdout)["canaries"]
    assert (row["state"], row["trip_reason"]) == ("tripped", "refusal-rate")

    # roll back: arm revision 1 again (its gate passes on the evidence), enforced once more
    done = _rensei(home, "enforce", "arm", "--repo", REPO, "--rev", "1", "--min-samples", "8")
    assert done.returncode == 0 and "armed acme/widgets on revision 1" in done.stdout, done.stderr
    status = json.loads(_rensei(home, "enforce", "status", "--json").stdout)
    assert status["canaries"][0]["ahead"] is True  # revision 2 is saved and waits for a gate
    events = _by_step(_seams(home, _steps(credential), tmp_path, "rolled-back"))
    for i, seam in enumerate(SEAM_FIRST):
        _expect_ran(events[i], "enforced", seam, ENFORCED_MODEL)

    # disarm: from now on, byte-identical to a home never armed, run with the same clock
    done = _rensei(home, "enforce", "disarm", "--repo", REPO)
    assert done.returncode == 0 and "disarmed acme/widgets" in done.stdout, done.stderr
    never = _home(tmp_path / "never-armed")
    steps = _steps(credential)
    after = _seams(home, steps, tmp_path, "after-disarm")
    baseline = _seams(never, steps, tmp_path, "never-armed")
    assert after == baseline
    assert [e["reason"] for e in after if e["event"] == "not-governed"] == ["nothing-armed"] * 4
    ours, theirs = _payloads(home)[-4:], _payloads(never)[-4:]
    assert [b for _, b, _ in ours] == [b for _, b, _ in theirs]
    assert all(is_shadow_payload(p) for _, _, p in ours)
    assert _rensei(home, "audit", "verify").returncode == 0
