"""Issue 20 section 1: snapshots the Rensei daemon verifies, and platform snapshots our host takes.

The daemon side is ``tests/daemon_reference.py``: the daemon's algorithm written from SEMANTICS.md
alone (it imports nothing of ours). Real homes, real keys, real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
import rfc8785
from click.testing import CliRunner, Result

from rensei_routing import signing
from rensei_routing.cli import cli
from rensei_routing.control.server import make_app, serve_in_thread
from rensei_routing.control.snapshots import home_jwks, snapshot_service
from rensei_routing.core.snapshot.envelope import compiled_moment
from rensei_routing.core.snapshot.postures import ClaimGate, check_placement, posterior_of
from rensei_routing.errors import ExpiredError, RollbackError, SnapshotVerificationError
from rensei_routing.host.cache import HostCache, HostConfig
from rensei_routing.store.home import Home

from . import daemon_reference as daemon

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rensei_routing" / "examples"
DATA = Path(__file__).resolve().parent / "data"
ORG = "acme"
PLATFORM_SEED = hashlib.sha256(b"platform signing key").digest()
PLATFORM_KID = "ksk_test"


def _run(runner: CliRunner, *args: str) -> Result:
    return runner.invoke(cli, list(args), catch_exceptions=False)


def _ok(runner: CliRunner, *args: str) -> Result:
    done = _run(runner, *args)
    assert done.exit_code == 0, (args, done.output)
    return done


def _org_doc(**statuses: str) -> dict[str, Any]:
    doc = json.loads((EXAMPLES / "org.json").read_text())
    for pool in doc["poolHostInventory"]["pools"]:
        pool["status"] = statuses.get(pool["id"].replace("-", "_"), pool["status"])
    return doc


def _control(runner: CliRunner, home: Path, tmp_path: Path, *init: str, **statuses: str) -> Path:
    """A control home with the example policies and org (pool statuses overridden); returns
    the exported latest snapshot file."""
    org = tmp_path / f"org-{home.name}.json"
    org.write_text(json.dumps(_org_doc(**statuses)))
    _ok(runner, "init", "--org", ORG, *init, "--home", str(home))
    _ok(runner, "policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home))
    _ok(runner, "org", "load", str(org), "--home", str(home))
    _ok(runner, "snapshot", "compile", "--home", str(home))
    out = tmp_path / f"snap-{home.name}.json"
    _ok(runner, "snapshot", "export", str(out), "--home", str(home))
    return out


def _raw_key(home: Path) -> bytes:
    return signing.load_public_key(home / "keys" / "host.pub").raw


# -- our snapshots, the daemon's algorithm ---------------------------------------------------------


def test_a_snapshot_compiled_here_verifies_under_the_daemons_algorithm(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "control"
    body = _control(runner, home, tmp_path, docker_b="paused").read_bytes()
    kid = signing.load_public_key(home / "keys" / "host.pub").key_id
    doc = daemon.verify(body, trusted={kid: _raw_key(home)})
    sections = doc["sections"]
    # its claim evaluation: a granted active pool is admitted, a paused one refused
    assert daemon.claim_permitted(sections, "local-a") == (True, "permitted")
    assert daemon.claim_permitted(sections, "docker-b") == (False, "pool-not-active")
    assert daemon.claim_permitted(sections, "local-old") == (False, "pool-not-active")
    assert daemon.claim_permitted(sections, "nowhere") == (False, "pool-absent")
    # ours agrees on the same sections
    assert ClaimGate(sections).check("local-a", "acme-evals").reason == "granted"
    assert ClaimGate(sections).check("docker-b", "acme-evals").reason == "pool-not-active"
    # local reality: a ready host and a known harness; a draining host; an unknown harness
    ready = {"pool_id": "local-a", "host_id": "host-1"}
    assert daemon.local_reality(sections, **ready, harness="claude-cli") == (True, "ok")
    assert check_placement(sections, **ready, harness="claude-cli").placeable
    assert daemon.local_reality(sections, **ready, harness="nope") == (False, "harness-unknown")
    assert check_placement(sections, **ready, harness="nope").reason == "harness-unknown"
    draining = {"pool_id": "docker-b", "host_id": "host-2", "harness": "claude-cli"}
    assert daemon.local_reality(sections, **draining) == (False, "host-not-ready")
    assert check_placement(sections, **draining).reason == "host-not-ready"
    # the other two envelope members, checked independently
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
    nacl.signing.VerifyKey(_raw_key(home)).verify(
        rfc8785.dumps(header), base64.b64decode(doc["headerSignature"])
    )
    assert doc["sectionDigests"] == {
        name: hashlib.sha256(rfc8785.dumps(sections[name])).hexdigest() for name in daemon.FIVE
    }
    # the bandit samples posteriors by (provider, workType)
    assert set(posterior_of(sections, "review")) == {"anthropic"}
    assert set(posterior_of(sections)) == {"anthropic", "zai-harness"}


def test_the_docs_envelope_verifies_both_ways() -> None:
    import re

    from rensei_routing.core.snapshot.envelope import verify_snapshot

    text = (ROOT / "docs" / "formats.md").read_text("utf-8")
    found = dict(re.findall(r"<!-- example: ([a-z-]+) -->\n```[a-z]*\n(.*?)\n```", text, re.S))
    key = signing.PublicKey.from_text(found["envelope-key"])
    body = found["envelope-daemon"].encode("utf-8")
    snap = verify_snapshot(body, lookup=signing.key_lookup_by_id({"ksk_example": key}))
    assert snap.signature_scope == "header" and snap.ruleset_rev == "example@1"
    doc = daemon.verify(body, trusted={"ksk_example": key.raw})
    assert daemon.claim_permitted(doc["sections"], "local-a") == (True, "permitted")


def test_the_daemon_refuses_a_tampered_snapshot_of_ours(runner: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "control"
    doc = json.loads(_control(runner, home, tmp_path).read_bytes())
    kid = doc["signingKeyId"]
    doc["sections"]["poolHostInventory"]["pools"][0]["status"] = "active"
    doc["sections"]["poolHostInventory"]["pools"].append({"id": "evil", "status": "active"})
    with pytest.raises(daemon.DaemonRefusal) as refused:
        daemon.verify(json.dumps(doc).encode(), trusted={kid: _raw_key(home)})
    assert refused.value.step == "contentHash"


def test_init_key_id_names_the_key_and_serve_publishes_it_as_jwks(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "control"
    body = _control(runner, home, tmp_path, "--key-id", "ksk_home.1").read_bytes()
    assert json.loads(body)["signingKeyId"] == "ksk_home.1"
    h = Home(home)
    service = snapshot_service(h, clock=lambda: datetime.now(UTC))
    server = serve_in_thread(
        make_app(now=lambda: datetime.now(UTC), token="t0ken", service=service, jwks=home_jwks(h)),
        host="127.0.0.1",
        port=0,
    )
    try:
        base = f"http://127.0.0.1:{server.port}"
        with urllib.request.urlopen(f"{base}/.well-known/jwks.json") as r:  # no token
            jwks = json.loads(r.read())
        request = urllib.request.Request(
            f"{base}/api/daemon/ruleset-snapshot", headers={"Authorization": "Bearer t0ken"}
        )
        with urllib.request.urlopen(request) as r:
            served = r.read()
    finally:
        server.stop()
    assert [k["kid"] for k in jwks["keys"]] == ["ksk_home.1"]
    assert set(jwks["keys"][0]) >= {"kty", "crv", "x"} and "d" not in jwks["keys"][0]
    assert daemon.verify(served, jwks=jwks)["signingKeyId"] == "ksk_home.1"
    # our host takes it through the same JWKS document
    host = tmp_path / "host"
    jwks_file = tmp_path / "jwks.json"
    jwks_file.write_text(json.dumps(jwks))
    _ok(runner, "host", "trust", "--jwks", str(jwks_file), "--home", str(host))
    served_file = tmp_path / "served.json"
    served_file.write_bytes(served)
    _ok(runner, "host", "sync", "--from", str(served_file), "--home", str(host))
    status = json.loads(_ok(runner, "host", "status", "--json", "--home", str(host)).stdout)
    assert status["snapshot"]["signatureScope"] == "header"
    assert status["snapshot"]["signingKeyId"] == "ksk_home.1"


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--key-id", "a b"), "not 1..128"), (("--key-id", "x" * 129), "not 1..128")],
)
def test_init_refuses_a_bad_key_id(
    runner: CliRunner, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    home = tmp_path / "c"
    done = _run(runner, "init", *args, "--home", str(home))
    assert done.exit_code != 0 and message in done.stderr and done.stderr.count("\n") == 1
    assert not home.exists()  # a failed init leaves nothing (issue 29, new user 8)
    _ok(runner, "init", "--home", str(home))
    done = _run(runner, "init", *args, "--home", str(home))
    assert done.exit_code != 0 and message in done.stderr and done.stderr.count("\n") == 1
    assert Home(home).snapshot_key_id() == Home(home).public_key().key_id  # nothing set


def test_init_refuses_to_change_the_key_id(runner: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "c"
    _ok(runner, "init", "--key-id", "one", "--home", str(home))
    _ok(runner, "init", "--key-id", "one", "--home", str(home))  # the same: a no-op
    done = _run(runner, "init", "--key-id", "two", "--home", str(home))
    assert done.exit_code != 0 and "already carry key id 'one'" in done.stderr
    assert Home(home).snapshot_key_id() == "one"


# -- platform snapshots, our host ------------------------------------------------------------------


def _platform_sections(status: str = "active") -> dict[str, Any]:
    org = _org_doc(docker_b=status)
    return {
        "policyBundle": {"policies": [], "bundleFormat": "platform-v1"},
        "capacityProfiles": {
            **org["capacityProfiles"],
            "platformOnly": {"note": "an unknown member, kept"},
        },
        "poolHostInventory": org["poolHostInventory"],
        "executionCellMatrix": org["executionCellMatrix"],
        "posteriorSummary": org["posteriorSummary"],
    }


def _platform(
    tmp_path: Path, *, revision: int = 7, compiled_at: str | None = None, status: str = "active"
) -> Path:
    when = compiled_at or _at(datetime.now(UTC) - timedelta(seconds=5))
    body = daemon.platform_snapshot(
        PLATFORM_SEED,
        kid=PLATFORM_KID,
        org_id="org_platform",
        revision=revision,
        compiled_at=when,
        sections=_platform_sections(status),
    )
    path = tmp_path / f"platform-{revision}-{status}.json"
    path.write_bytes(body)
    return path


def _platform_key(tmp_path: Path) -> Path:
    path = tmp_path / "platform.pub"
    signing.save_public_key(signing.PublicKey(daemon.public_raw(PLATFORM_SEED)), path)
    return path


def _offset_time(moment: datetime) -> str:
    """``moment`` with a +02:00 offset and nine fraction digits."""
    local = moment.astimezone(UTC) + timedelta(hours=2)
    return local.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123+02:00"


def test_a_platform_snapshot_is_adopted_by_a_hash_only_host_and_refused_by_a_header_host(
    runner: CliRunner, tmp_path: Path
) -> None:
    moment = datetime.now(UTC) - timedelta(seconds=5)
    snap = _platform(tmp_path, compiled_at=_offset_time(moment))
    daemon.verify(snap.read_bytes(), trusted={PLATFORM_KID: daemon.public_raw(PLATFORM_SEED)})
    key = _platform_key(tmp_path)
    # trusted hash-only: adopted, and every answer says how far the signature went
    taker = tmp_path / "taker"
    _ok(runner, "init", "--home", str(taker))  # claims are recorded in the home's audit log
    _ok(
        runner,
        "host",
        "trust",
        str(key),
        "--kid",
        PLATFORM_KID,
        "--scope",
        "hash-only",
        "--home",
        str(taker),
    )
    done = _ok(runner, "host", "sync", "--from", str(snap), "--home", str(taker))
    assert done.output.startswith("adopted: org_platform@7"), done.output
    status = json.loads(_ok(runner, "host", "status", "--json", "--home", str(taker)).stdout)
    assert status["snapshot"]["signatureScope"] == "hash-only"
    line = _ok(runner, "host", "status", "--home", str(taker)).stdout
    assert "org_platform@7" in line and "(hash-only signature" in line
    expected = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert status["snapshot"]["compiledAt"] == expected  # offset and fraction normalised
    claim = _run(
        runner,
        "host",
        "claim",
        "--pool",
        "local-a",
        "--project",
        "acme-evals",
        "--json",
        "--home",
        str(taker),
    )
    assert claim.exit_code == 0, claim.output
    assert json.loads(claim.stdout)["signatureScope"] == "hash-only"
    cached = HostCache(taker / "host").load()
    assert cached is not None
    assert cached.sections["capacityProfiles"]["platformOnly"] == {
        "note": "an unknown member, kept"
    }
    # trusted with the default scope (header): refused, nothing stored
    strict = tmp_path / "strict"
    _ok(runner, "host", "trust", str(key), "--kid", PLATFORM_KID, "--home", str(strict))
    refused = _run(runner, "host", "sync", "--from", str(snap), "--home", str(strict))
    assert refused.exit_code != 0 and "header-signature-missing" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert not (strict / "host" / "snapshot.json").exists()
    assert HostCache(strict / "host").last_adopted() is None
    # not trusted under that kid at all: unknown key
    other = tmp_path / "other"
    _ok(runner, "host", "trust", str(key), "--home", str(other))  # under its derived id
    unknown = _run(runner, "host", "sync", "--from", str(snap), "--home", str(other))
    assert unknown.exit_code != 0 and "unknown-key" in unknown.stderr


def test_the_routing_config_endpoint_carries_the_signature_scope(
    runner: CliRunner, tmp_path: Path
) -> None:
    from rensei_routing.host.status import host_status_data

    taker = tmp_path / "taker"
    cache = HostCache(taker / "host")
    cache.trust(
        signing.PublicKey(daemon.public_raw(PLATFORM_SEED)), kid=PLATFORM_KID, scope="hash-only"
    )
    now = datetime.now(UTC)
    cache.accept(_platform(tmp_path).read_bytes(), now=now, source="t")
    app = make_app(now=lambda: now, host_status=lambda: host_status_data(cache, now=now))
    server = serve_in_thread(app, host="127.0.0.1", port=0)
    try:
        url = f"http://127.0.0.1:{server.port}/api/daemon/routing/config"
        with urllib.request.urlopen(url) as r:
            config = json.loads(r.read())
    finally:
        server.stop()
    assert config["snapshot"]["signatureScope"] == "hash-only"


T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _hash_only_cache(tmp_path: Path) -> HostCache:
    cache = HostCache(tmp_path / "h" / "host")
    cache.trust(
        signing.PublicKey(daemon.public_raw(PLATFORM_SEED)), kid=PLATFORM_KID, scope="hash-only"
    )
    return cache


def _at(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_hash_only_snapshot_ages_from_the_later_of_compiled_at_and_first_seen(
    tmp_path: Path,
) -> None:
    cache = _hash_only_cache(tmp_path)
    config = HostConfig()
    body = _platform(tmp_path, compiled_at=_at(T0)).read_bytes()
    first_seen = T0 + timedelta(minutes=20)
    assert cache.accept(body, now=first_seen, source="t").adopted
    # 35 minutes after compiledAt, 15 after the host first saw the hash: degraded, not refused
    snap, fresh = cache.current(now=T0 + timedelta(minutes=35), config=config)
    assert fresh.age_ms == 15 * 60_000 and fresh.degraded
    assert fresh.signature_scope == "hash-only"
    with pytest.raises(ExpiredError):
        cache.current(now=first_seen + timedelta(minutes=31), config=config)
    # a header-signed snapshot ages from its signed compiledAt alone
    assert compiled_moment(snap) == T0


def test_a_hash_only_host_still_refuses_a_lower_revision_or_another_hash(
    tmp_path: Path,
) -> None:
    cache = _hash_only_cache(tmp_path)
    now = T0 + timedelta(seconds=30)
    assert cache.accept(
        _platform(tmp_path, revision=7, compiled_at=_at(T0)).read_bytes(), now=now, source="t"
    ).adopted
    before = cache.snapshot_path.read_bytes()
    held = (cache.directory / "held.json").read_bytes()
    lower = _platform(tmp_path, revision=6, compiled_at=_at(T0 + timedelta(seconds=20)))
    with pytest.raises(RollbackError, match="older"):
        cache.accept(lower.read_bytes(), now=now, source="t")
    other = _platform(tmp_path, revision=7, compiled_at=_at(T0), status="paused")
    with pytest.raises(RollbackError, match="equivocation"):
        cache.accept(other.read_bytes(), now=now, source="t")
    assert cache.snapshot_path.read_bytes() == before
    assert (cache.directory / "held.json").read_bytes() == held


def test_a_hash_only_copy_fetched_late_ages_from_its_first_sight(tmp_path: Path) -> None:
    """A copy compiled long before the host first saw it is aged from that first sight (the
    later moment); a header-signed one would be aged from its signed compiledAt."""
    cache = _hash_only_cache(tmp_path)
    first = T0 + timedelta(minutes=10)
    cache.accept(_platform(tmp_path, compiled_at=_at(T0)).read_bytes(), now=first, source="t")
    _, fresh = cache.current(now=first + timedelta(minutes=1), config=HostConfig())
    assert fresh.age_ms == 60_000
    # re-offered later with the same hash, its first sight does not move
    cache.accept(
        _platform(tmp_path, compiled_at=_at(T0)).read_bytes(),
        now=first + timedelta(minutes=5),
        source="t",
    )
    _, fresh = cache.current(now=first + timedelta(minutes=6), config=HostConfig())
    assert fresh.age_ms == 6 * 60_000


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda d: d.pop("headerSignature"), "header-signature-missing"),
        (
            lambda d: d.update(headerSignature=base64.b64encode(bytes(64)).decode()),
            "header-signature",
        ),
        (lambda d: d.update(compiledAt="2030-01-01T00:00:00Z"), "header-signature"),
        (lambda d: d["sectionDigests"].update(policyBundle="0" * 64), "section-digests"),
        (lambda d: d.update(signature=base64.b64encode(bytes(64)).decode()), "signature"),
    ],
)
def test_a_header_host_refuses_each_edit_with_its_reason_and_keeps_its_copy(
    runner: CliRunner, tmp_path: Path, edit: Any, reason: str
) -> None:
    control = tmp_path / "control"
    good = _control(runner, control, tmp_path)
    cache = HostCache(tmp_path / "host" / "host")
    cache.trust(signing.load_public_key(control / "keys" / "host.pub"))
    now = datetime.now(UTC)
    assert cache.accept(good.read_bytes(), now=now, source="t").adopted
    _ok(runner, "snapshot", "compile", "--home", str(control))
    newer = tmp_path / "newer.json"
    _ok(runner, "snapshot", "export", str(newer), "--home", str(control))
    doc = json.loads(newer.read_bytes())
    edit(doc)
    before = cache.snapshot_path.read_bytes()
    held = (cache.directory / "held.json").read_bytes()
    with pytest.raises(SnapshotVerificationError) as refused:
        cache.accept(json.dumps(doc).encode(), now=now, source="t")
    assert refused.value.reason == reason
    assert cache.snapshot_path.read_bytes() == before
    assert (cache.directory / "held.json").read_bytes() == held


# -- JWKS ------------------------------------------------------------------------------------------


def _jwk(seed: bytes, kid: Any, **over: Any) -> dict[str, Any]:
    x = base64.urlsafe_b64encode(daemon.public_raw(seed)).decode().rstrip("=")
    return {"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x, **over}


def test_trust_jwks_skips_malformed_entries_and_reports_them(
    runner: CliRunner, tmp_path: Path
) -> None:
    good = _jwk(PLATFORM_SEED, PLATFORM_KID)
    padded = _jwk(PLATFORM_SEED, "padded")
    padded["x"] += "="
    document = {
        "keys": [
            good,
            {"kty": "RSA", "kid": "rsa", "n": "x", "e": "AQAB"},
            _jwk(PLATFORM_SEED, "p256", crv="P-256"),
            _jwk(PLATFORM_SEED, "bad kid!"),
            padded,
            _jwk(PLATFORM_SEED, "short", x="AAAA"),
            "not an object",
            _jwk(PLATFORM_SEED, PLATFORM_KID),
        ]
    }
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(document))
    host = tmp_path / "host"
    done = _ok(
        runner, "host", "trust", "--jwks", str(path), "--scope", "hash-only", "--home", str(host)
    )
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped")]
    assert [line.split(":")[0] for line in skipped] == [
        f"skipped keys[{i}]" for i in (1, 2, 3, 4, 5, 6, 7)
    ]
    entries = HostCache(host / "host").trusted_entries()
    assert list(entries) == [PLATFORM_KID] and entries[PLATFORM_KID][1] == "hash-only"
    _ok(runner, "host", "sync", "--from", str(_platform(tmp_path)), "--home", str(host))


def test_trust_jwks_with_no_usable_key_writes_nothing(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{"kty": "RSA"}]}))
    host = tmp_path / "host"
    done = _run(runner, "host", "trust", "--jwks", str(path), "--home", str(host))
    assert done.exit_code != 0 and "no usable Ed25519 key" in done.stderr
    assert not (host / "host" / "trusted").exists()
    path.write_text("[1]")
    done = _run(runner, "host", "trust", "--jwks", str(path), "--home", str(host))
    assert done.exit_code != 0 and "keys" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [(), ("k.pub", "--jwks", "j.json"), ("--jwks", "j.json", "--kid", "x")],
)
def test_trust_takes_exactly_one_source(runner: CliRunner, tmp_path: Path, args: Any) -> None:
    done = _run(runner, "host", "trust", *args, "--home", str(tmp_path / "h"))
    assert done.exit_code != 0 and done.stderr.count("\n") == 1


def test_trust_refuses_a_bad_kid(runner: CliRunner, tmp_path: Path) -> None:
    done = _run(
        runner,
        "host",
        "trust",
        str(_platform_key(tmp_path)),
        "--kid",
        "../x",
        "--home",
        str(tmp_path / "h"),
    )
    assert done.exit_code != 0 and "not 1..128" in done.stderr
    assert not (tmp_path / "h" / "host" / "trusted").exists() or not any(
        (tmp_path / "h" / "host" / "trusted").iterdir()
    )


# -- existing homes --------------------------------------------------------------------------------


def test_a_v2_home_reads_its_org_data_in_the_daemon_shapes(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "v2"
    shutil.copytree(DATA / "v2_home", home)
    _ok(runner, "init", "--home", str(home))  # the writer migrates the schema
    shown = json.loads(_ok(runner, "org", "show", "--json", "--home", str(home)).stdout)
    assert shown["capacityProfiles"]["grants"] == [
        {"id": "general.all", "isPrimary": False, "profileId": "general", "projectId": None},
        {
            "id": "gpu-heavy.acme-evals",
            "isPrimary": False,
            "profileId": "gpu-heavy",
            "projectId": "acme-evals",
        },
    ]
    assert shown["capacityProfiles"]["profiles"][0]["poolIds"] == ["docker-b", "local-a"]
    assert shown["poolHostInventory"]["hosts"][0] == {
        "executionPoolId": "k8s-gpu",
        "id": "gpu-node-1",
    }
    assert shown["poolHostInventory"]["pools"][0]["substrateClass"] == "docker"
    assert shown["posteriorSummary"]["posteriors"][0] == {
        "alpha": 40,
        "beta": 10,
        "provider": "anthropic",
        "workType": "default",
    }
    # the snapshots it compiled before still verify; the next one is the daemon's
    _ok(runner, "snapshot", "show", "--home", str(home))
    _ok(runner, "snapshot", "compile", "--home", str(home))
    out = tmp_path / "next.json"
    _ok(runner, "snapshot", "export", str(out), "--home", str(home))
    kid = json.loads(out.read_bytes())["signingKeyId"]
    doc = daemon.verify(out.read_bytes(), trusted={kid: _raw_key(home)})
    assert daemon.claim_permitted(doc["sections"], "local-a") == (True, "permitted")
    assert daemon.claim_permitted(doc["sections"], "local-old") == (False, "pool-not-active")


def _claim_host(runner: CliRunner, tmp_path: Path) -> Path:
    control = tmp_path / "control"
    snap = _control(runner, control, tmp_path)
    host = tmp_path / "host"
    _ok(runner, "init", "--home", str(host))
    _ok(runner, "host", "trust", str(control / "keys" / "host.pub"), "--home", str(host))
    _ok(runner, "host", "sync", "--from", str(snap), "--home", str(host))
    return host


@pytest.mark.parametrize(
    ("pool", "extra", "admitted", "reason"),
    [
        ("local-a", ("--host-id", "host-1", "--harness", "claude-cli"), True, "granted"),
        ("local-a", ("--host-id", "not-listed"), True, "granted"),
        ("docker-b", ("--host-id", "host-2"), False, "host-not-ready"),
        ("local-a", ("--harness", "zai-cli"), True, "granted"),
        ("local-a", ("--harness", "nope"), False, "harness-unknown"),
        ("k8s-gpu", ("--host-id", "gpu-node-1"), True, "granted"),
    ],
)
def test_a_claim_checks_the_hosts_status_and_the_harness(
    runner: CliRunner,
    tmp_path: Path,
    pool: str,
    extra: tuple[str, ...],
    admitted: bool,
    reason: str,
) -> None:
    host = _claim_host(runner, tmp_path)
    before = HostCache(host / "host").snapshot_path.read_bytes()
    done = _run(
        runner,
        "host",
        "claim",
        "--pool",
        pool,
        "--project",
        "acme-evals",
        *extra,
        "--json",
        "--home",
        str(host),
    )
    assert done.exit_code == (0 if admitted else 1), done.output
    record = json.loads(done.stdout)
    assert (record["admitted"], record["reason"]) == (admitted, reason)
    assert record["signatureScope"] == "header"
    assert HostCache(host / "host").snapshot_path.read_bytes() == before


def test_a_pool_outside_allowed_project_ids_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    org = _org_doc()
    org["capacityProfiles"]["grants"].append(
        {"id": "gpu-heavy.other", "profileId": "gpu-heavy", "projectId": "other"}
    )
    sections = {**org, "policyBundle": None}
    gate = ClaimGate(sections)
    assert gate.check("k8s-gpu", "acme-evals").reason == "granted"
    assert gate.check("k8s-gpu", "other").reason == "project-not-allowed"
    assert gate.check("k8s-gpu", None).reason == "granted"  # the daemon's pool rules alone


def test_a_claim_naming_no_project_is_decided_as_the_daemon_decides_it(
    runner: CliRunner, tmp_path: Path
) -> None:
    """SEMANTICS.md: a claim that names no project is decided by the three pool rules alone
    (in the inventory, active, named by a capacity profile), exactly as the daemon decides it;
    a claim that names a project keeps the grant check. The same snapshot, both sides."""
    org = _org_doc()
    local = next(p for p in org["poolHostInventory"]["pools"] if p["id"] == "local-a")
    org["poolHostInventory"]["pools"] += [{**local, "id": "spare"}, {**local, "id": "orphan"}]
    # "spare": named by a profile no grant covers; "orphan": named by no profile
    org["capacityProfiles"]["profiles"].append(
        {"id": "reserve", "name": "Reserve", "poolIds": ["spare"], "revision": 1}
    )
    org_file = tmp_path / "org.json"
    org_file.write_text(json.dumps(org))
    control, host = tmp_path / "control", tmp_path / "host"
    _ok(runner, "init", "--org", ORG, "--home", str(control))
    _ok(runner, "policy", "save", str(EXAMPLES / "policies.json"), "--home", str(control))
    _ok(runner, "org", "load", str(org_file), "--home", str(control))
    _ok(runner, "snapshot", "compile", "--home", str(control))
    snap = tmp_path / "snap.json"
    _ok(runner, "snapshot", "export", str(snap), "--home", str(control))
    _ok(runner, "init", "--home", str(host))
    _ok(runner, "host", "trust", str(control / "keys" / "host.pub"), "--home", str(host))
    _ok(runner, "host", "sync", "--from", str(snap), "--home", str(host))
    kid = signing.load_public_key(control / "keys" / "host.pub").key_id
    sections = daemon.verify(snap.read_bytes(), trusted={kid: _raw_key(control)})["sections"]
    cached = HostCache(host / "host").snapshot_path.read_bytes()
    pools = [p["id"] for p in sections["poolHostInventory"]["pools"]] + ["nowhere"]
    verdicts = {}
    for pool in pools:
        theirs, _ = daemon.claim_permitted(sections, pool)
        assert ClaimGate(sections).check(pool, None).admitted is theirs, pool
        done = _run(runner, "host", "claim", "--pool", pool, "--json", "--home", str(host))
        assert done.exit_code == (0 if theirs else 1), (pool, done.output)
        assert json.loads(done.stdout)["admitted"] is theirs, pool
        verdicts[pool] = theirs
    assert verdicts == {
        "local-a": True,
        "docker-b": True,
        "k8s-gpu": True,  # granted to acme-evals only, allowedProjectIds [acme-evals]
        "local-old": False,  # draining
        "spare": True,
        "orphan": False,
        "nowhere": False,
    }
    # A claim that names a project keeps the grant and allowedProjectIds checks.
    for pool, project, reason in [
        ("k8s-gpu", "other", "pool-not-granted"),
        ("spare", "acme-evals", "pool-not-granted"),
        ("k8s-gpu", "acme-evals", "granted"),
    ]:
        args = ("host", "claim", "--pool", pool, "--project", project, "--json")
        done = _run(runner, *args, "--home", str(host))
        assert done.exit_code == (0 if reason == "granted" else 1), done.output
        assert json.loads(done.stdout)["reason"] == reason
    assert HostCache(host / "host").snapshot_path.read_bytes() == cached


def test_org_load_keeps_unknown_fields_and_names_a_mistyped_one(
    runner: CliRunner, tmp_path: Path
) -> None:
    home = tmp_path / "c"
    _ok(runner, "init", "--home", str(home))
    doc = _org_doc()
    doc["poolHostInventory"]["pools"][0]["platformTier"] = {"gold": True}
    doc["executionCellMatrix"]["schemaVersion"] = 3
    path = tmp_path / "org.json"
    path.write_text(json.dumps(doc))
    _ok(runner, "org", "load", str(path), "--home", str(home))
    shown = json.loads(_ok(runner, "org", "show", "--json", "--home", str(home)).stdout)
    pools = {p["id"]: p for p in shown["poolHostInventory"]["pools"]}
    assert pools["local-a"]["platformTier"] == {"gold": True}
    assert shown["executionCellMatrix"]["schemaVersion"] == 3
    for edit, where in [
        (lambda d: d["capacityProfiles"]["profiles"][0].update(poolIds="local-a"), "poolIds"),
        (lambda d: d["poolHostInventory"]["hosts"][0].update(maxSessions=-1), "maxSessions"),
        (lambda d: d["capacityProfiles"]["grants"][0].update(isPrimary="yes"), "isPrimary"),
        (lambda d: d["posteriorSummary"]["posteriors"][0].pop("workType"), "workType"),
        (
            lambda d: d["executionCellMatrix"]["providers"][0].update(harnessByAuthMode=[1]),
            "harnessByAuthMode",
        ),
    ]:
        bad = _org_doc()
        edit(bad)
        path.write_text(json.dumps(bad))
        refused = _run(runner, "org", "load", str(path), "--home", str(home))
        assert refused.exit_code != 0 and where in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1
        again = json.loads(_ok(runner, "org", "show", "--json", "--home", str(home)).stdout)
        assert again == shown  # nothing stored


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        ("2026-01-01T01:00:00.123456789+01:00", "2026-01-01T00:00:00.123456Z"),
        ("2026-01-01T00:00:00z", "2026-01-01T00:00:00.000000Z"),
        ("2025-12-31T19:30:00-04:30", "2026-01-01T00:00:00.000000Z"),
        ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),  # our own form, unchanged
    ],
)
def test_compiled_at_with_an_offset_or_a_long_fraction_is_normalised(
    given: str, normalised: str
) -> None:
    from rensei_routing.core.snapshot.envelope import verify_snapshot

    body = daemon.platform_snapshot(
        PLATFORM_SEED,
        kid=PLATFORM_KID,
        org_id="o",
        revision=1,
        compiled_at=given,
        sections=_platform_sections(),
    )
    key = signing.PublicKey(daemon.public_raw(PLATFORM_SEED))
    snap = verify_snapshot(
        body,
        lookup=signing.key_lookup_by_id({PLATFORM_KID: key}),
        scope_of=lambda kid: "hash-only",
    )
    assert snap.compiled_at == normalised
    assert snap.header.compiled_at == given  # the text as it came


@pytest.mark.parametrize("bad", ["2026-13-01T00:00:00Z", "2026-01-01 00:00:00Z", "2026-01-01"])
def test_a_compiled_at_that_is_not_rfc_3339_is_refused(bad: str) -> None:
    from rensei_routing.core.snapshot.envelope import verify_snapshot

    body = daemon.platform_snapshot(
        PLATFORM_SEED,
        kid=PLATFORM_KID,
        org_id="o",
        revision=1,
        compiled_at=bad,
        sections=_platform_sections(),
    )
    key = signing.PublicKey(daemon.public_raw(PLATFORM_SEED))
    with pytest.raises(SnapshotVerificationError) as refused:
        verify_snapshot(
            body,
            lookup=signing.key_lookup_by_id({PLATFORM_KID: key}),
            scope_of=lambda kid: "hash-only",
        )
    assert refused.value.reason == "compiled-at"


def test_decisions_through_the_cached_snapshot_carry_the_signature_scope(
    runner: CliRunner, tmp_path: Path
) -> None:
    host = _claim_host(runner, tmp_path)
    context = str(EXAMPLES / "context.json")
    one = json.loads(
        _ok(
            runner, "explain", context, "--snapshot", "--record", "--json", "--home", str(host)
        ).stdout
    )
    assert one["signatureScope"] == "header" and one["rulesetRev"] == f"{ORG}@1"
    lines = _ok(
        runner,
        "explain-batch",
        str(EXAMPLES / "contexts.jsonl"),
        "--snapshot",
        "--record",
        "--home",
        str(host),
    ).stdout.splitlines()
    assert lines and all(json.loads(line)["signatureScope"] == "header" for line in lines)
    done = _ok(runner, "audit", "verify", "--home", str(host))
    assert done.exit_code == 0


def test_seal_hashes_agree_with_the_reference_encoder() -> None:
    from rensei_routing.core.snapshot.envelope import content_hash, seal, section_digests

    key = signing.PrivateKey(PLATFORM_SEED)
    sections = _platform_sections()
    snap = seal(
        org_id="o",
        revision=1,
        compiled_at="2026-01-01T00:00:00Z",
        sections=sections,
        signing_key_id="k",
        sign=key.sign,
    )
    assert snap.content_hash == content_hash(sections)
    assert snap.section_digests == section_digests(sections)
    assert snap.content_hash == hashlib.sha256(rfc8785.dumps(sections)).hexdigest()


def test_snapshot_verify_takes_an_opaque_kid_and_a_scope(runner: CliRunner, tmp_path: Path) -> None:
    snap, key = _platform(tmp_path), _platform_key(tmp_path)
    trust = f"{key}={PLATFORM_KID}"
    strict = _run(runner, "snapshot", "verify", str(snap), "--trust", trust)
    assert strict.exit_code != 0 and "header-signature-missing" in strict.stderr
    done = _ok(
        runner, "snapshot", "verify", str(snap), "--trust", trust, "--scope", "hash-only", "--json"
    )
    assert json.loads(done.stdout)["signatureScope"] == "hash-only"
    unknown = _run(runner, "snapshot", "verify", str(snap), "--trust", str(key))
    assert unknown.exit_code != 0 and "unknown-key" in unknown.stderr
    bad = _run(runner, "snapshot", "verify", str(snap), "--trust", f"{key}=a b")
    assert bad.exit_code != 0 and "not 1..128" in bad.stderr and bad.stderr.count("\n") == 1
