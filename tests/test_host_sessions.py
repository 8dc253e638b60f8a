"""Admission receipts and the sessions under them (issue 24): signed receipts checked offline,
every refusal typed with nothing written, the postures of running work (an outage, DegradedAfter,
RefuseAfter and a damaged cache never stop a session; a newer snapshot that revokes the pool says
``grant-revoked``; a lapsed lease expires), the budget posture counted in sessions, and several
processes sharing one set of sessions."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rensei_routing import signing
from rensei_routing.core.snapshot.authz import AuthorizationEngine
from rensei_routing.core.snapshot.envelope import RulesetSnapshot, seal
from rensei_routing.core.snapshot.receipts import Receipt, parse_receipt
from rensei_routing.errors import ReceiptError, StoreError
from rensei_routing.host.cache import HostCache
from rensei_routing.host.claims import claim_payload, claim_request, decide_cached
from rensei_routing.host.sessions import BudgetLimits, HostSessions
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

CONTROL = signing.PrivateKey(bytes(range(32)))
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _sections(*, granted: tuple[str, ...] = ("pool-a", "pool-b")) -> dict[str, Any]:
    return {
        "poolHostInventory": {
            "pools": [
                {"id": "pool-a", "status": "active"},
                {"id": "pool-b", "status": "active"},
            ],
            "hosts": [],
        },
        "capacityProfiles": {
            # a pool not granted is named by no profile: a claim naming no project is decided
            # by the pool rules alone (SEMANTICS.md)
            "profiles": [{"id": f"p-{p}", "pools": [p]} for p in granted],
            "grants": [{"profile": f"p-{p}"} for p in granted],
        },
    }


def _snap(revision: int, *, granted: tuple[str, ...] = ("pool-a", "pool-b")) -> RulesetSnapshot:
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=NOW.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections=_sections(granted=granted),
        signing_key_id=CONTROL.public_key.key_id,
        sign=CONTROL.sign,
    )


class Host:
    """A host home with a trusted control key and snapshot r1 cached."""

    def __init__(self, path: Path, vfs: str | None = None) -> None:
        self.home = Home(path, vfs=vfs)
        self.home.init()
        self.cache = HostCache(path / "host")
        self.cache.trust(CONTROL.public_key)
        self.cache.accept(_snap(1).to_bytes(), now=NOW, source="test")
        self.cache.record_fetch(now=NOW, source="test", ok=True, detail="")
        self.sessions = HostSessions(self.home, self.cache)

    def claim(
        self, pool: str = "pool-a", project: str | None = None, *, at: datetime = NOW
    ) -> Receipt:
        decision = decide_cached(
            self.cache, claim_request(pool, project), at, lambda: AuthorizationEngine(())
        )
        assert decision.allowed, decision
        receipt = self.sessions.issue(
            decision, pool=pool, project=project, admitted_at=at, lease_ms=600_000
        )
        self.sessions.record_claim(claim_payload(decision, pool, project), at, receipt)
        return receipt

    def records(self) -> list[dict[str, Any]]:
        with AuditLog.open(self.home) as log:
            return [r.payload for r in log.records()]

    def state(self) -> tuple[int, list[dict[str, Any]]]:
        """What a refusal must leave unchanged: the audit log's length and every session."""
        return len(self.records()), [r.to_dict() for r in self.sessions.sessions()]


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path / "h")


def _edited(receipt: Receipt, **fields: Any) -> Receipt:
    return Receipt.from_dict({**receipt.to_dict(), **fields})


# -- receipts ------------------------------------------------------------------------------------


def test_a_receipt_is_signed_by_the_host_key_and_recorded_with_the_claim(host: Host) -> None:
    receipt = host.claim()
    assert receipt.host_id == host.home.info().key_id
    assert receipt.signing_key_id == host.home.public_key().key_id
    assert (receipt.ruleset_rev, receipt.degraded, receipt.pool) == ("org_a@1", False, "pool-a")
    assert signing.check(host.home.public_key(), receipt.signed_bytes(), receipt.signature_bytes())
    claim = host.records()[-1]
    assert claim["record_type"] == "claim-decision" and claim["admitted"] is True
    assert claim["receipt"] == receipt.to_dict()
    assert parse_receipt(receipt.to_bytes()) == receipt


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"pool": "pool-b"}, "bad-signature"),
        ({"leaseMs": 86_400_000}, "bad-signature"),
        ({"degraded": True}, "bad-signature"),
        ({"signingKeyId": "0123456789abcdef"}, "wrong-key"),
    ],
)
def test_an_edited_or_foreign_receipt_starts_nothing(
    host: Host, edit: dict[str, Any], reason: str
) -> None:
    receipt = host.claim()
    before = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(_edited(receipt, **edit), now=NOW)
    assert e.value.reason == reason
    assert host.state() == before


def test_a_receipt_signed_by_another_key_is_wrong_key(host: Host, tmp_path: Path) -> None:
    other = Host(tmp_path / "other")
    foreign = other.claim()
    before = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(foreign, now=NOW)
    assert e.value.reason == "wrong-key" and host.state() == before


def test_a_receipt_this_host_signed_but_never_issued_is_unknown(host: Host) -> None:
    decision = decide_cached(
        host.cache, claim_request("pool-a", None), NOW, lambda: AuthorizationEngine(())
    )
    unrecorded = host.sessions.issue(decision, pool="pool-a", project=None, admitted_at=NOW)
    before = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(unrecorded, now=NOW)
    assert e.value.reason == "unknown" and host.state() == before


def test_a_receipt_lapsed_unused_and_a_used_one_are_refused(host: Host) -> None:
    receipt = host.claim()
    before = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(receipt, now=NOW + timedelta(minutes=11))
    assert e.value.reason == "expired" and host.state() == before
    host.sessions.start(receipt, now=NOW)
    used = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(receipt, now=NOW)
    assert e.value.reason == "used" and host.state() == used


@pytest.mark.parametrize(
    "text",
    [b"", b"[]", b'{"receiptId": "rcpt_00"}', b"\xff", b"x" * 70_000, b'{"a": 1, "a": 2}'],
)
def test_a_malformed_receipt_file_is_refused(text: bytes) -> None:
    with pytest.raises(ReceiptError) as e:
        parse_receipt(text)
    assert e.value.reason == "malformed"


def test_a_refused_claim_has_no_receipt(host: Host) -> None:
    host.cache.accept(_snap(2, granted=("pool-a",)).to_bytes(), now=NOW, source="test")
    decision = decide_cached(
        host.cache, claim_request("pool-b", None), NOW, lambda: AuthorizationEngine(())
    )
    assert not decision.allowed
    with pytest.raises(ReceiptError):
        host.sessions.issue(decision, pool="pool-b", project=None, admitted_at=NOW)


# -- sessions and their postures -----------------------------------------------------------------


def test_heartbeats_renew_and_end_is_final(host: Host) -> None:
    row, budget = host.sessions.start(host.claim(), now=NOW)
    assert row.state == "open" and budget.reason == "within-limit"
    beat = host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=9))
    assert beat.action == "continue" and beat.revoked_rev is None
    assert beat.session.expires_ms > row.expires_ms
    host.sessions.end(row.session_id, now=NOW + timedelta(minutes=10))
    before = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=10))
    assert e.value.reason == "ended" and host.state() == before
    with pytest.raises(ReceiptError) as e:
        host.sessions.end(row.session_id, now=NOW + timedelta(minutes=10))
    assert e.value.reason == "ended"
    with pytest.raises(ReceiptError) as e:
        host.sessions.heartbeat("sess_00", now=NOW)
    assert e.value.reason == "unknown-session"
    kinds = [(r["from"], r["to"], r["reason"]) for r in host.records() if "to" in r]
    assert kinds == [("none", "open", "started"), ("open", "ended", "ended")]


def test_a_lapsed_lease_expires_with_its_record(host: Host) -> None:
    row, _ = host.sessions.start(host.claim(), now=NOW)
    later = NOW + timedelta(minutes=11)  # lease 10 min
    assert host.sessions.sessions()[0].state_at(int(later.timestamp() * 1000)) == "expired"
    with pytest.raises(ReceiptError) as e:
        host.sessions.heartbeat(row.session_id, now=later)
    assert e.value.reason == "ended" and "expired" in str(e.value)
    # the heartbeat that found the lapse recorded the expiry, once
    expiry = [r for r in host.records() if r.get("reason") == "lease-lapsed"]
    assert [(r["session_id"], r["to"]) for r in expiry] == [(row.session_id, "expired")]
    other, _ = host.sessions.start(host.claim(at=later), now=later)
    assert [r.state for r in host.sessions.sessions()] == ["open", "expired"]
    assert len([r for r in host.records() if r.get("reason") == "lease-lapsed"]) == 1
    assert other.session_id != row.session_id


@pytest.mark.parametrize(
    ("minutes", "what"),
    [(7, "past DegradedAfter"), (45, "past RefuseAfter"), (0, "damaged cache")],
)
def test_an_outage_never_stops_an_admitted_session(host: Host, minutes: int, what: str) -> None:
    row, _ = host.sessions.start(host.claim(), now=NOW)
    host.cache.record_fetch(now=NOW, source="test", ok=False, detail="cannot fetch")
    if what == "damaged cache":
        host.cache.snapshot_path.write_bytes(b"{damaged")
    at = NOW
    for _ in range(5):  # heartbeat through the outage, each within the 10-minute lease
        at += timedelta(minutes=max(minutes, 1) / 5)
        beat = host.sessions.heartbeat(row.session_id, now=at)
        assert beat.action == "continue" and beat.session.state == "open", what
    assert beat.snapshot == ("unreadable" if what == "damaged cache" else "ok")


def test_a_new_claim_past_refuse_after_is_refused_while_the_session_runs(host: Host) -> None:
    row, _ = host.sessions.start(host.claim(), now=NOW)
    late = NOW + timedelta(minutes=31)
    host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=9))
    host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=18))
    host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=27))
    decision = decide_cached(
        host.cache, claim_request("pool-a", None), late, lambda: AuthorizationEngine(())
    )
    assert (decision.allowed, decision.reason) == (False, "snapshot-expired")
    assert host.sessions.heartbeat(row.session_id, now=late).action == "continue"


@pytest.mark.parametrize("on_revoke", ["finish", "drain"])
def test_a_newer_snapshot_revoking_the_pool_says_grant_revoked(host: Host, on_revoke: str) -> None:
    row, _ = host.sessions.start(host.claim("pool-b"), now=NOW, on_revoke=on_revoke)
    keep, _ = host.sessions.start(host.claim("pool-a"), now=NOW)
    host.cache.accept(_snap(2, granted=("pool-a",)).to_bytes(), now=NOW, source="test")
    beat = host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=1))
    assert beat.revoked_rev == "org_a@2"
    assert beat.action == ("drain" if on_revoke == "drain" else "continue")
    assert beat.session.state == ("ended" if on_revoke == "drain" else "open")
    assert host.sessions.heartbeat(keep.session_id, now=NOW).revoked_rev is None
    revoked = [r for r in host.records() if r.get("reason") == "grant-revoked"]
    assert [(r["session_id"], r["revokedRev"]) for r in revoked] == [(row.session_id, "org_a@2")]
    if on_revoke == "finish":  # told once, recorded once, and it keeps running
        again = host.sessions.heartbeat(row.session_id, now=NOW + timedelta(minutes=2))
        assert again.revoked_rev == "org_a@2" and again.action == "continue"
        assert len([r for r in host.records() if r.get("reason") == "grant-revoked"]) == 1


def test_an_older_or_equal_snapshot_never_revokes(host: Host) -> None:
    """Only a newer snapshot revokes: the grant in force at admission is the floor."""
    row, _ = host.sessions.start(host.claim("pool-b"), now=NOW)
    assert host.sessions.heartbeat(row.session_id, now=NOW).revoked_rev is None


# -- the budget posture --------------------------------------------------------------------------


def test_the_authoritative_counter_bounds_open_sessions(host: Host) -> None:
    limits = BudgetLimits(inflight_limit=2)
    for _ in range(2):
        host.sessions.start(host.claim(), now=NOW, budget=limits)
    before = host.state()
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(host.claim(), now=NOW, budget=limits)
    assert e.value.reason == "budget" and "over-limit" in str(e.value)
    after = host.state()
    assert after[1] == before[1]  # no session; only the claim's own record was added
    assert after[0] == before[0] + 1


def test_a_counter_read_failure_admits_nothing(host: Host) -> None:
    """The authoritative counter fails closed: when the sessions cannot be read (the table is
    gone from a damaged store), starting a session raises a StoreError and writes nothing."""
    receipt = host.claim()
    conn = host.home.connect(write=True)
    try:
        conn.execute("ALTER TABLE sessions RENAME TO sessions_damaged")
        records = conn.execute("SELECT count(*) FROM audit_records").get
    finally:
        conn.close()
    with pytest.raises(StoreError):
        host.sessions.start(receipt, now=NOW)
    conn = host.home.connect(write=True)
    try:
        assert conn.execute("SELECT count(*) FROM audit_records").get == records
        assert conn.execute("SELECT count(*) FROM sessions_damaged").get == 0
    finally:
        conn.close()


def test_during_an_outage_the_local_cap_bounds_each_project(host: Host) -> None:
    host.cache.record_fetch(now=NOW, source="test", ok=False, detail="cannot fetch")
    limits = BudgetLimits(local_cap=2)
    reasons = [
        host.sessions.start(host.claim(project="acme"), now=NOW, budget=limits)[1].reason
        for _ in range(2)
    ]
    assert reasons == ["local-cap", "local-cap"]
    with pytest.raises(ReceiptError) as e:
        host.sessions.start(host.claim(project="acme"), now=NOW, budget=limits)
    assert "local-cap-reached" in str(e.value)
    # another project has its own bound; a healthy signal lifts the cap
    assert host.sessions.start(host.claim(project="globex"), now=NOW, budget=limits)[1]
    host.cache.record_fetch(now=NOW, source="test", ok=True, detail="")
    _, budget = host.sessions.start(host.claim(project="acme"), now=NOW, budget=limits)
    assert budget.reason == "within-limit"


# -- several processes ---------------------------------------------------------------------------


def _start_one(path: str, receipt: bytes, cap: int, out: Any) -> None:
    home = Home(Path(path))
    sessions = HostSessions(home, HostCache(Path(path) / "host"))
    try:
        sessions.start(parse_receipt(receipt), now=NOW, budget=BudgetLimits(local_cap=cap))
        out.put("admitted")
    except ReceiptError as e:
        out.put(e.reason)


def test_processes_racing_for_a_local_cap_admit_exactly_the_cap(host: Host) -> None:
    host.cache.record_fetch(now=NOW, source="test", ok=False, detail="cannot fetch")
    receipts = [host.claim(project="acme").to_bytes() for _ in range(8)]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_start_one, args=(str(host.home.path), r, 3, out)) for r in receipts
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = sorted(out.get(timeout=10) for _ in procs)
    assert results.count("admitted") == 3 and results.count("budget") == 5
    assert len([r for r in host.sessions.sessions() if r.state == "open"]) == 3


def test_sessions_survive_a_host_restart_through_the_cli(tmp_path: Path) -> None:
    """A real process starts the session, another heartbeats and lists it: the sessions live in
    the host's SQLite store."""
    host = Host(tmp_path / "h")
    receipt_file = tmp_path / "r.json"
    receipt_file.write_bytes(host.claim().to_bytes())

    def rensei(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rensei_routing.cli", "--no-plugins", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    home = str(host.home.path)
    # the CLI's clock is now; the receipt was admitted at NOW (earlier): a fresh claim instead
    started = rensei("host", "session", "start", "--receipt", str(receipt_file), "--home", home)
    assert started.returncode == 1 and "expired" in started.stderr  # lapsed unused
    assert "Traceback" not in started.stderr
    claim = rensei(
        "host", "claim", "--pool", "pool-a", "--receipt", str(receipt_file), "--home", home
    )
    # the cached snapshot is old by the real clock: the claim is refused as expired, loudly
    assert claim.returncode == 1 and "RefuseAfter" in claim.stderr
    fresh = seal(
        org_id="org_a",
        revision=2,
        compiled_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections=_sections(),
        signing_key_id=CONTROL.public_key.key_id,
        sign=CONTROL.sign,
    )
    host.cache.accept(fresh.to_bytes(), now=datetime.now(UTC), source="test")
    claim = rensei(
        "host", "claim", "--pool", "pool-a", "--receipt", str(receipt_file), "--home", home
    )
    assert claim.returncode == 0, claim.stderr
    verify = rensei("host", "receipt", "verify", str(receipt_file), "--home", home)
    assert verify.returncode == 0 and verify.stdout.startswith("valid: rcpt_")
    started = rensei(
        "host", "session", "start", "--receipt", str(receipt_file), "--home", home, "--json"
    )
    assert started.returncode == 0, started.stderr
    session_id = json.loads(started.stdout)["sessionId"]
    beat = rensei("host", "session", "heartbeat", session_id, "--home", home, "--json")
    assert beat.returncode == 0 and json.loads(beat.stdout)["action"] == "continue"
    listed = json.loads(rensei("host", "session", "list", "--home", home, "--json").stdout)
    assert [(s["sessionId"], s["state"]) for s in listed] == [(session_id, "open")]
    assert rensei("host", "session", "end", session_id, "--home", home).returncode == 0
    again = rensei("host", "session", "heartbeat", session_id, "--home", home)
    assert again.returncode == 1 and again.stderr.startswith("Error: refused: ended")
    forged = json.loads(receipt_file.read_text())
    forged["pool"] = "pool-b"
    receipt_file.write_text(json.dumps(forged))
    refused = rensei("host", "receipt", "verify", str(receipt_file), "--home", home)
    assert refused.returncode == 1 and "bad-signature" in refused.stderr
