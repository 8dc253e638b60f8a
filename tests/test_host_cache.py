"""The host's snapshot cache: independent verification, rollback refusal, crash-safe persist,
re-verification on reload. Every refusal asserts the typed error and that the persisted copy is
byte-for-byte unchanged."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rensei_routing import signing
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.snapshot.envelope import RulesetSnapshot, seal
from rensei_routing.errors import (
    ConfigurationError,
    ExpiredError,
    FutureSnapshotError,
    RollbackError,
    SnapshotError,
    SnapshotFormatError,
    SnapshotVerificationError,
)
from rensei_routing.host.cache import HostCache, HostConfig

KEY = signing.PrivateKey(bytes(range(32)))
ROGUE = signing.PrivateKey(bytes(range(2, 34)))
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SECTIONS: dict[str, Any] = {
    "poolHostInventory": {"pools": [{"id": "pool-a", "status": "active"}], "hosts": []},
    "capacityProfiles": {
        "profiles": [{"id": "g", "pools": ["pool-a"]}],
        "grants": [{"profile": "g"}],
    },
}


def _snap(
    revision: int = 5,
    key: signing.PrivateKey = KEY,
    minutes: int = 0,
    sections: dict[str, Any] | None = None,
) -> RulesetSnapshot:
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=(NOW + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections=SECTIONS if sections is None else sections,
        signing_key_id=key.public_key.key_id,
        sign=key.sign,
    )


@pytest.fixture
def cache(tmp_path: Path) -> HostCache:
    c = HostCache(tmp_path / "host")
    c.trust(KEY.public_key)
    c.accept(_snap().to_bytes(), now=NOW, source="test")
    return c


def _edit(snap: RulesetSnapshot, **fields: Any) -> bytes:
    doc = json.loads(snap.to_bytes())
    doc.update(fields)
    return json.dumps(doc).encode()


def _hash_only(snap: RulesetSnapshot) -> bytes:
    doc = json.loads(snap.to_bytes())
    del doc["headerSignature"], doc["sectionDigests"]
    return json.dumps(doc).encode()


def _header_sig(doc: dict[str, Any], key: signing.PrivateKey) -> str:
    header = {
        k: doc[k]
        for k in (
            "algorithm",
            "compiledAt",
            "contentHash",
            "orgId",
            "revision",
            "rulesetRev",
            "signingKeyId",
        )
    }
    return base64.b64encode(key.sign(canonical_bytes(header))).decode()


def _rogue_signed() -> bytes:
    doc = json.loads(_snap(revision=9).to_bytes())
    doc["signature"] = _header_sig(doc, ROGUE)
    return json.dumps(doc).encode()


def _tampered_section() -> bytes:
    doc = json.loads(_snap(revision=9).to_bytes())
    doc["sections"]["poolHostInventory"]["pools"].append({"id": "evil", "status": "active"})
    return json.dumps(doc).encode()


ATTACKS: list[tuple[str, Any, type[Exception]]] = [
    (
        "bad-signature",
        lambda: _edit(_snap(revision=9), signature=base64.b64encode(bytes(64)).decode()),
        SnapshotVerificationError,
    ),
    ("wrong-key", _rogue_signed, SnapshotVerificationError),
    ("unknown-key-id", lambda: _snap(revision=9, key=ROGUE).to_bytes(), SnapshotVerificationError),
    ("tampered-section", _tampered_section, SnapshotVerificationError),
    ("algorithm", lambda: _edit(_snap(revision=9), algorithm="ed448"), SnapshotVerificationError),
    (
        "compiledAt-edited",
        lambda: _edit(_snap(revision=9), compiledAt="2027-01-01T00:00:00Z"),
        SnapshotVerificationError,
    ),
    (
        "revision-edited",
        lambda: _edit(_snap(revision=9), revision=10, rulesetRev="org_a@10"),
        SnapshotVerificationError,
    ),
    (
        # the daemon's form, a key trusted with the default scope (header): refused
        # header-signature-missing (tests/test_daemon_interop.py covers hash-only trust)
        "signature-over-hash-only",
        lambda: _hash_only(_snap(revision=9)),
        SnapshotVerificationError,
    ),
    ("older-revision", lambda: _snap(revision=4).to_bytes(), RollbackError),
    ("same-revision-other-hash", lambda: _snap(revision=5, sections={}).to_bytes(), RollbackError),
    ("truncated-body", lambda: _snap(revision=9).to_bytes()[:-10], SnapshotFormatError),
    ("garbage", lambda: b"\x00garbage", SnapshotFormatError),
    (
        "duplicate-keys",
        lambda: (
            _snap(revision=9).to_bytes().replace(b'{"algorithm"', b'{"revision":1,"algorithm"', 1)
        ),
        SnapshotFormatError,
    ),
]


@pytest.mark.parametrize(("name", "make", "error"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_refused_and_persisted_copy_unchanged(
    cache: HostCache, name: str, make: Any, error: type[Exception]
) -> None:
    before = cache.snapshot_path.read_bytes()
    with pytest.raises(error):
        cache.accept(make(), now=NOW, source="attacker")
    assert cache.snapshot_path.read_bytes() == before
    assert cache.load() == _snap()
    last = cache.last_fetch()
    assert last is not None and last["ok"] is False and last["source"] == "attacker"


def test_oversized_body_is_refused(cache: HostCache, monkeypatch: pytest.MonkeyPatch) -> None:
    import rensei_routing.core.snapshot.envelope as mod

    before = cache.snapshot_path.read_bytes()
    monkeypatch.setattr(mod, "MAX_SNAPSHOT_BYTES", 64)
    with pytest.raises(SnapshotFormatError, match="larger"):
        cache.accept(_snap(revision=9).to_bytes(), now=NOW, source="t")
    assert cache.snapshot_path.read_bytes() == before


def test_newer_revision_and_reseal_are_adopted(cache: HostCache) -> None:
    later = NOW + timedelta(minutes=5)
    assert cache.accept(_snap(revision=5).to_bytes(), now=later, source="t").adopted is False
    resealed = _snap(revision=5, minutes=3)
    assert cache.accept(resealed.to_bytes(), now=later, source="t").adopted is True
    assert cache.load() == resealed
    newer = _snap(revision=6, minutes=4, sections={"posteriorSummary": {"arms": []}})
    assert cache.accept(newer.to_bytes(), now=later, source="t").adopted is True
    assert cache.snapshot_path.read_bytes() == newer.to_bytes()


def test_edited_file_on_disk_is_not_trusted_on_reload(cache: HostCache) -> None:
    data = cache.snapshot_path.read_bytes()
    cache.snapshot_path.write_bytes(data.replace(b'"pool-a"', b'"pool-z"', 1))
    with pytest.raises(SnapshotError, match="no longer verifies"):
        cache.load()
    with pytest.raises(SnapshotError):
        cache.current(now=NOW, config=HostConfig())


def test_untrusting_a_key_makes_the_copy_unusable(cache: HostCache) -> None:
    for path in cache.trusted_dir.iterdir():
        path.unlink()
    with pytest.raises(SnapshotError, match="unknown-key"):
        cache.load()


def test_ages(cache: HostCache) -> None:
    config = HostConfig()
    _, fresh = cache.current(now=NOW + timedelta(minutes=1), config=config)
    assert not fresh.degraded and fresh.age_ms == 60_000
    _, degraded = cache.current(now=NOW + timedelta(minutes=6), config=config)
    assert degraded.degraded and degraded.ruleset_rev == "org_a@5"
    with pytest.raises(ExpiredError) as e:
        cache.current(now=NOW + timedelta(minutes=31), config=config)
    assert e.value.refuse_after_ms == 1_800_000
    with pytest.raises(FutureSnapshotError):
        cache.current(now=NOW - timedelta(minutes=5), config=config)


def test_config_bounds_are_checked(tmp_path: Path) -> None:
    cache = HostCache(tmp_path / "h")
    with pytest.raises(ConfigurationError, match="RefuseAfter"):
        HostConfig.from_dict({"degraded_after_s": 600, "refuse_after_s": 60})
    cache.save_config(HostConfig(endpoint="http://127.0.0.1:1", refuse_after_s=900))
    assert cache.config().refuse_after_s == 900
    (tmp_path / "h" / "config.json").write_text('{"refuse_after_s": "soon"}')
    with pytest.raises(ConfigurationError):
        cache.config()


_PERSIST_CHILD = r"""
import sys, time
from datetime import UTC, datetime
from pathlib import Path
from rensei_routing.host import files
real_replace = files.os.replace
def slow_replace(a, b):
    print("staged", flush=True)
    time.sleep(30)
    real_replace(a, b)
files.os.replace = slow_replace
from rensei_routing.host.cache import HostCache
cache = HostCache(Path(sys.argv[1]))
cache.accept(Path(sys.argv[2]).read_bytes(), now=datetime.now(UTC), source="child")
"""


def test_sigkill_mid_persist_leaves_the_old_snapshot(cache: HostCache, tmp_path: Path) -> None:
    before = cache.snapshot_path.read_bytes()
    newer = tmp_path / "newer.json"
    newer.write_bytes(_snap(revision=8).to_bytes())
    with subprocess.Popen(
        [sys.executable, "-c", _PERSIST_CHILD, str(cache.directory), str(newer)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"staged"  # the temp file is fully written
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    assert cache.snapshot_path.read_bytes() == before
    assert cache.load() == _snap()
    # the next sync succeeds
    assert cache.accept(newer.read_bytes(), now=NOW, source="t").adopted
    assert cache.load() == _snap(revision=8)


def test_a_snapshot_compiled_in_the_future_is_refused_at_accept(cache: HostCache) -> None:
    """Issue 19 #4: a control clock 24 h ahead; adopted, the copy would refuse every claim."""
    before = cache.snapshot_path.read_bytes()
    floor = cache.last_adopted()
    future = _snap(revision=6, minutes=24 * 60)
    with pytest.raises(FutureSnapshotError, match="in the future"):
        cache.accept(future.to_bytes(), now=NOW, source="ahead")
    assert cache.snapshot_path.read_bytes() == before and cache.last_adopted() == floor
    last = cache.last_fetch()
    assert last is not None and last["ok"] is False and "future" in last["detail"]
    snap, _ = cache.current(now=NOW, config=HostConfig())  # claims still answer from the old one
    assert snap == _snap()
    # the skew bound is strict: exactly 60 s ahead is adopted, once the clock allows the rest
    assert cache.accept(_snap(revision=6, minutes=1).to_bytes(), now=NOW, source="t").adopted
    with pytest.raises(FutureSnapshotError):
        cache.accept(future.to_bytes(), now=NOW + timedelta(hours=23), source="ahead")
    assert cache.accept(future.to_bytes(), now=NOW + timedelta(hours=24), source="t").adopted


def test_host_sync_refuses_a_future_snapshot_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rensei_routing.cli import cli

    home = tmp_path / "h"
    HostCache(home / "host").trust(KEY.public_key)
    good = tmp_path / "good.json"
    good.write_bytes(seal_now(revision=1).to_bytes())
    assert CliRunner().invoke(cli, ["host", "sync", "--from", str(good), "--home", str(home)])
    held = (home / "host" / "snapshot.json").read_bytes()
    ahead = tmp_path / "ahead.json"
    ahead.write_bytes(seal_now(revision=2, ahead=timedelta(hours=24)).to_bytes())
    done = CliRunner().invoke(cli, ["host", "sync", "--from", str(ahead), "--home", str(home)])
    assert done.exit_code == 1 and "in the future" in done.output
    assert len(done.output.strip().splitlines()) == 1 and "Traceback" not in done.output
    assert (home / "host" / "snapshot.json").read_bytes() == held
    status = CliRunner().invoke(cli, ["host", "status", "--home", str(home)]).output
    assert "Ruleset snapshot: org_a@1" in status and "FAILED" in status


def seal_now(*, revision: int, ahead: timedelta = timedelta(0)) -> RulesetSnapshot:
    moment = datetime.now(UTC) + ahead
    return seal(
        org_id="org_a",
        revision=revision,
        compiled_at=moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        sections=SECTIONS,
        signing_key_id=KEY.public_key.key_id,
        sign=KEY.sign,
    )
