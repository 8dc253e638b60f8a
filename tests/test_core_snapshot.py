"""Ruleset snapshot envelope (SEMANTICS.md "Ruleset snapshot"): content hash, signed header,
the verification order, every attack, succession (rollback / equivocation) and the three ages.
Real Ed25519 keys through ``rensei_routing.signing``."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rensei_routing import signing
from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.snapshot.envelope import (
    RulesetSnapshot,
    check_succession,
    content_hash,
    seal,
    verify_snapshot,
)
from rensei_routing.core.snapshot.freshness import Freshness, FreshnessPolicy, format_age
from rensei_routing.errors import (
    ConfigurationError,
    ExpiredError,
    FutureSnapshotError,
    RollbackError,
    SnapshotFormatError,
    SnapshotVerificationError,
)

KEY = signing.PrivateKey(bytes(range(32)))
OTHER = signing.PrivateKey(bytes(range(1, 33)))
SECTIONS: dict[str, Any] = {
    "policyBundle": {"revision": 3, "policies": [{"id": "p"}]},
    "capacityProfiles": {"profiles": [{"id": "gpu", "pools": ["pool-a"]}], "grants": []},
    "poolHostInventory": {"pools": [{"id": "pool-a", "status": "active"}], "hosts": []},
}
T0 = "2026-11-30T09:00:00.000000Z"


def _seal(key: signing.PrivateKey = KEY, **over: Any) -> RulesetSnapshot:
    args: dict[str, Any] = {
        "org_id": "org_a1b2c3",
        "revision": 42,
        "compiled_at": T0,
        "sections": SECTIONS,
        "signing_key_id": key.public_key.key_id,
        "sign": key.sign,
        "validators": ("policy-set-valid",),
    }
    args.update(over)
    return seal(**args)


def _lookup(*keys: signing.PrivateKey) -> Callable[[str], Callable[[bytes, bytes], bool] | None]:
    trusted = {k.public_key.key_id: k.public_key for k in keys}

    def lookup(key_id: str) -> Callable[[bytes, bytes], bool] | None:
        public = trusted.get(key_id)
        if public is None:
            return None
        return lambda message, sig: signing.check(public, message, sig)

    return lookup


def _doc(snap: RulesetSnapshot) -> dict[str, Any]:
    return json.loads(snap.to_bytes())


def _bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()


def test_round_trip_and_rev_id() -> None:
    snap = _seal()
    assert snap.ruleset_rev == "org_a1b2c3@42"
    back = verify_snapshot(snap.to_bytes(), lookup=_lookup(KEY))
    assert back == snap
    assert back.sections["executionCellMatrix"] is None  # absent = null


def test_content_hash_is_order_independent_and_covers_absent_sections() -> None:
    reordered = dict(reversed(list(SECTIONS.items())))
    assert content_hash(reordered) == content_hash(SECTIONS)
    explicit_null = dict(SECTIONS, posteriorSummary=None)
    assert content_hash(explicit_null) == content_hash(SECTIONS)
    assert content_hash(dict(SECTIONS, posteriorSummary={})) != content_hash(SECTIONS)
    with pytest.raises(SnapshotFormatError, match="unknown section"):
        content_hash({"extra": 1})


def test_two_seals_agree_byte_for_byte() -> None:
    assert _seal().to_bytes() == _seal().to_bytes()


def _resigned(doc: dict[str, Any], key: signing.PrivateKey = OTHER) -> dict[str, Any]:
    """``doc`` re-signed correctly by ``key`` (an attacker holding another key)."""
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
    doc = dict(doc, signature=base64.b64encode(key.sign(canonical_bytes(header))).decode())
    return doc


ATTACKS: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], type[Exception], str]] = [
    (
        "tampered-section",
        lambda d: {
            **d,
            "sections": {
                **d["sections"],
                "poolHostInventory": {
                    "pools": [
                        {"id": "pool-a", "status": "active"},
                        {"id": "evil", "status": "active"},
                    ],
                    "hosts": [],
                },
            },
        },
        SnapshotVerificationError,
        "content-hash",
    ),
    ("algorithm", lambda d: {**d, "algorithm": "rsa"}, SnapshotVerificationError, "algorithm"),
    (
        "compiledAt-edited",
        lambda d: {**d, "compiledAt": "2026-11-30T10:00:00.000000Z"},
        SnapshotVerificationError,
        "signature",
    ),
    (
        "revision-edited",
        lambda d: {**d, "revision": 43, "rulesetRev": "org_a1b2c3@43"},
        SnapshotVerificationError,
        "signature",
    ),
    (
        "rulesetRev-mismatch",
        lambda d: {**d, "rulesetRev": "org_a1b2c3@41"},
        SnapshotVerificationError,
        "ruleset-rev",
    ),
    (
        "bad-signature",
        lambda d: {**d, "signature": base64.b64encode(bytes(64)).decode()},
        SnapshotVerificationError,
        "signature",
    ),
    (
        "signature-not-base64",
        lambda d: {**d, "signature": "!!"},
        SnapshotVerificationError,
        "signature",
    ),
    (
        "unknown-key-id",
        lambda d: {**d, "signingKeyId": "00" * 8},
        SnapshotVerificationError,
        "unknown-key",
    ),
    ("wrong-key-claims-trusted-id", lambda d: _resigned(d), SnapshotVerificationError, "signature"),
    (
        "signature-over-hash-only",
        lambda d: {
            **{k: v for k, v in d.items() if k not in ("headerSignature", "sectionDigests")},
            "signature": base64.b64encode(KEY.sign(bytes.fromhex(d["contentHash"]))).decode(),
        },
        SnapshotVerificationError,
        "header-signature-missing",
    ),
    (
        "missing-field",
        lambda d: {k: v for k, v in d.items() if k != "sections"},
        SnapshotFormatError,
        "missing",
    ),
    ("unknown-field", lambda d: {**d, "extra": 1}, SnapshotFormatError, "unknown field"),
    ("revision-not-int", lambda d: {**d, "revision": "42"}, SnapshotFormatError, "integer"),
    ("revision-too-big", lambda d: {**d, "revision": 2**53}, SnapshotFormatError, "outside"),
    ("key-id-form", lambda d: {**d, "signingKeyId": "a b"}, SnapshotFormatError, "key id"),
    (
        "unknown-section",
        lambda d: {**d, "sections": {**d["sections"], "x": 1}},
        SnapshotVerificationError,
        "content-hash",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "error", "match"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attacks_are_refused_with_their_reason(
    name: str,
    mutate: Callable[[dict[str, Any]], dict[str, Any]],
    error: type[Exception],
    match: str,
) -> None:
    data = _bytes(mutate(_doc(_seal())))
    with pytest.raises(error, match=match):
        verify_snapshot(data, lookup=_lookup(KEY))


def test_another_trusted_key_cannot_sign_for_this_key_id() -> None:
    # trusted: both keys; the envelope names KEY's id but OTHER signed it
    data = _bytes(_resigned(_doc(_seal())))
    with pytest.raises(SnapshotVerificationError, match="signature"):
        verify_snapshot(data, lookup=_lookup(KEY, OTHER))
    # and a snapshot honestly signed by OTHER verifies when OTHER is trusted, not otherwise
    honest = _seal(OTHER).to_bytes()
    assert verify_snapshot(honest, lookup=_lookup(KEY, OTHER)).header.signing_key_id == (
        OTHER.public_key.key_id
    )
    with pytest.raises(SnapshotVerificationError, match="unknown-key"):
        verify_snapshot(honest, lookup=_lookup(KEY))


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"a":1,"a":2}', b"\xff\xfe", b'{"x": NaN}', b"[" * 100_000],
    ids=["empty", "truncated", "array", "duplicate-key", "not-utf8", "nan", "deep"],
)
def test_garbage_is_a_format_error(data: bytes) -> None:
    with pytest.raises(SnapshotFormatError):
        verify_snapshot(data, lookup=_lookup(KEY))


def test_truncated_body_is_refused() -> None:
    body = _seal().to_bytes()
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(SnapshotFormatError):
            verify_snapshot(body[:cut], lookup=_lookup(KEY))


def test_oversized_body_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    import rensei_routing.core.snapshot.envelope as mod

    monkeypatch.setattr(mod, "MAX_SNAPSHOT_BYTES", 100)
    with pytest.raises(SnapshotFormatError, match="larger than"):
        verify_snapshot(_seal().to_bytes(), lookup=_lookup(KEY))


def test_succession_refuses_rollback_and_equivocation() -> None:
    held = _seal(revision=42)
    assert check_succession(None, held) is True
    assert check_succession(held, _seal(revision=43)) is True
    assert check_succession(held, _seal(revision=42)) is False  # the same copy: nothing to do
    # the same content re-sealed later refreshes the held copy; an older seal does not
    assert check_succession(held, _seal(revision=42, compiled_at="2026-11-30T09:05:00Z"))
    assert not check_succession(held, _seal(revision=42, compiled_at="2026-11-30T08:55:00Z"))
    with pytest.raises(RollbackError, match="older"):
        check_succession(held, _seal(revision=41))
    other_content = _seal(revision=42, sections={"policyBundle": {"policies": []}})
    with pytest.raises(RollbackError, match="equivocation"):
        check_succession(held, other_content)
    with pytest.raises(RollbackError, match="org"):
        check_succession(held, _seal(org_id="org_zzz", revision=50))


def test_seal_refuses_unpublishable_values() -> None:
    with pytest.raises(SnapshotFormatError):
        _seal(org_id="bad org")
    with pytest.raises(SnapshotFormatError):
        _seal(revision=0)
    with pytest.raises(SnapshotFormatError):
        _seal(compiled_at="yesterday")


# -- ages ---------------------------------------------------------------------------------------

C = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("after", "degraded"),
    [
        (timedelta(0), False),
        (timedelta(minutes=5), False),  # strict >: exactly at the bound is still fresh
        (timedelta(minutes=5, milliseconds=1), True),
        (timedelta(minutes=30), True),  # exactly at RefuseAfter: still served
    ],
)
def test_fresh_and_degraded(after: timedelta, degraded: bool) -> None:
    f = FreshnessPolicy().judge("o@1", C, C + after)
    assert f.degraded is degraded and f.age_ms == after // timedelta(milliseconds=1)
    assert f.to_dict() == {"rulesetRev": "o@1", "snapshotAgeMs": f.age_ms, "degraded": degraded}


def test_refused_past_refuse_after_carries_rev_age_and_bound() -> None:
    with pytest.raises(ExpiredError) as e:
        FreshnessPolicy().judge("o@7", C, C + timedelta(minutes=30, milliseconds=1))
    assert (e.value.ruleset_rev, e.value.age_ms, e.value.refuse_after_ms) == (
        "o@7",
        1_800_001,
        1_800_000,
    )


def test_future_compiled_at_is_refused_beyond_skew() -> None:
    assert FreshnessPolicy().judge("o@1", C, C - timedelta(seconds=59)).age_ms == 0
    with pytest.raises(FutureSnapshotError):
        FreshnessPolicy().judge("o@1", C, C - timedelta(seconds=61))


def test_bounds_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="RefuseAfter"):
        FreshnessPolicy(degraded_after=timedelta(minutes=10), refuse_after=timedelta(minutes=5))
    with pytest.raises(ConfigurationError):
        FreshnessPolicy(max_skew=timedelta(seconds=-1))


def test_live_shape_is_distinct() -> None:
    assert Freshness.live().to_dict() == {
        "rulesetRev": None,
        "snapshotAgeMs": None,
        "degraded": False,
    }
    assert [format_age(ms) for ms in (45_000, 192_000, 3_720_000)] == ["45s", "3m12s", "1h02m"]


def test_a_pretty_printed_copy_verifies_through_the_strict_path() -> None:
    snap = _seal()
    pretty = json.dumps(json.loads(snap.to_bytes()), indent=2, sort_keys=False).encode()
    assert pretty != snap.to_bytes()
    assert verify_snapshot(b"\n " + pretty + b"\n", lookup=_lookup(KEY)) == snap


def test_a_duplicate_key_inside_the_sections_is_refused() -> None:
    doc = _doc(_seal())
    text = json.dumps(doc, indent=1)
    # smuggle a second "pools" into the inventory: a last-wins parser would read another set
    forged = text.replace('"pools": [', '"pools": [], "pools": [', 1).encode()
    with pytest.raises(SnapshotVerificationError, match="duplicate key"):
        verify_snapshot(forged, lookup=_lookup(KEY))


@pytest.mark.parametrize(
    "text",
    ['{"a":1,}', '{"a" 1}', '{"a":1 "b":2}', "{} x", '{"a":1', "{1:2}", "  [ ]"],
)
def test_the_top_level_scanner_refuses_malformed_objects(text: str) -> None:
    with pytest.raises(SnapshotFormatError):
        verify_snapshot(text.encode(), lookup=_lookup(KEY))
