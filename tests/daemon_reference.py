"""An independent Rensei daemon, written from SEMANTICS.md "Reference wire formats / Rensei daemon
snapshot verification" only: it imports nothing of rensei_routing (json, hashlib, the rfc8785
library and PyNaCl directly), so a snapshot that passes here passes for the daemon's algorithm,
not for ours. Also a platform-style publisher (opaque kid, hash-only signature, daemon shapes)
built the same way, for the host side's tests.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import nacl.exceptions
import nacl.signing
import rfc8785

FIVE = (
    "policyBundle",
    "capacityProfiles",
    "poolHostInventory",
    "executionCellMatrix",
    "posteriorSummary",
)
_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))"
)


class DaemonRefusal(Exception):
    """The daemon refused a snapshot; ``step`` names the check."""

    def __init__(self, step: str, detail: str = "") -> None:
        super().__init__(f"{step}: {detail}")
        self.step = step


def _time(text: Any) -> datetime:
    m = _TIME.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise DaemonRefusal("compiledAt", repr(text))
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    if m.group(8):
        tz = UTC
    else:
        sign = 1 if m.group(9) == "+" else -1
        tz = timezone(sign * timedelta(hours=int(m.group(10)), minutes=int(m.group(11))))
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz).astimezone(UTC)


def _jwks_key(document: Mapping[str, Any], kid: str) -> bytes | None:
    for entry in document.get("keys", []):
        if not isinstance(entry, Mapping):
            continue
        if entry.get("kty") != "OKP" or entry.get("crv") != "Ed25519":
            continue
        x = entry.get("x")
        if entry.get("kid") != kid or not isinstance(x, str) or "=" in x:
            continue
        try:
            raw = base64.urlsafe_b64decode(x + "=" * (-len(x) % 4))
        except (binascii.Error, ValueError):
            continue
        if len(raw) == 32:
            return raw
    return None


def verify(
    body: bytes,
    *,
    trusted: Mapping[str, bytes] | None = None,
    jwks: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The daemon's verification of a fetched body; returns the decoded envelope.

    Raises:
        DaemonRefusal: naming the failing step.
    """
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise DaemonRefusal("decode", str(e)) from e
    if doc.get("algorithm") != "ed25519":
        raise DaemonRefusal("algorithm")
    kid = doc.get("signingKeyId")
    if not isinstance(kid, str) or not kid.strip():
        raise DaemonRefusal("signingKeyId")
    sections = doc.get("sections") or {}
    content = {name: sections.get(name) for name in FIVE}
    digest = hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    if digest != doc.get("contentHash"):
        raise DaemonRefusal("contentHash", f"{digest} != {doc.get('contentHash')}")
    raw = (trusted or {}).get(kid)
    if raw is None and jwks is not None:
        raw = _jwks_key(jwks, kid)
    if raw is None:
        raise DaemonRefusal("unknown-kid", kid)
    try:
        signature = base64.b64decode(doc.get("signature", ""), validate=True)
        nacl.signing.VerifyKey(raw).verify(bytes.fromhex(digest), signature)
    except (binascii.Error, ValueError, nacl.exceptions.BadSignatureError) as e:
        raise DaemonRefusal("signature", str(e)) from e
    doc["_compiledAt"] = _time(doc.get("compiledAt"))
    return dict(doc)


def claim_permitted(sections: Mapping[str, Any], pool_id: str | None) -> tuple[bool, str]:
    """The daemon's claim permission check against a verified snapshot."""
    if pool_id is None:
        return True, "non-pool"
    pools = {p.get("id"): p for p in sections["poolHostInventory"].get("pools") or []}
    if pool_id not in pools:
        return False, "pool-absent"
    if pools[pool_id].get("status") != "active":
        return False, "pool-not-active"
    named = {
        pid
        for prof in sections["capacityProfiles"].get("profiles") or []
        for pid in prof.get("poolIds") or []
    }
    if pool_id not in named:
        return False, "pool-not-in-profile"
    return True, "permitted"


def local_reality(
    sections: Mapping[str, Any], *, pool_id: str, host_id: str, harness: str
) -> tuple[bool, str]:
    """The daemon's local-reality check: this host's row ready when present; harness known."""
    for row in sections["poolHostInventory"].get("hosts") or []:
        mine = row.get("executionPoolId") == pool_id and row.get("id") == host_id
        if mine and row.get("status") != "ready":
            return False, "host-not-ready"
    harnesses = {
        h
        for prov in sections["executionCellMatrix"].get("providers") or []
        for h in (prov.get("harnessByAuthMode") or {}).values()
    }
    return (harness in harnesses), ("ok" if harness in harnesses else "harness-unknown")


def platform_snapshot(
    seed: bytes,
    *,
    kid: str,
    org_id: str,
    revision: int,
    compiled_at: str,
    sections: Mapping[str, Any],
) -> bytes:
    """A snapshot as the platform publishes it: hash-only signature, an opaque kid, pretty JSON
    (not RFC 8785 bytes), no headerSignature, a sectionDigests map in its own form."""
    content = {name: sections.get(name) for name in FIVE}
    digest = hashlib.sha256(rfc8785.dumps(content)).hexdigest()
    signature = nacl.signing.SigningKey(seed).sign(bytes.fromhex(digest)).signature
    doc = {
        "orgId": org_id,
        "revision": revision,
        "rulesetRev": f"{org_id}@{revision}",
        "contentHash": digest,
        "signature": base64.b64encode(signature).decode("ascii"),
        "signingKeyId": kid,
        "algorithm": "ed25519",
        "compiledAt": compiled_at,
        "validators": [],
        "sectionDigests": {
            name: "sha256:" + hashlib.sha256(json.dumps(content[name]).encode()).hexdigest()
            for name in FIVE
        },
        "sections": content,
    }
    return json.dumps(doc, indent=2).encode("utf-8")


def public_raw(seed: bytes) -> bytes:
    """The raw public key of ``seed``."""
    return bytes(nacl.signing.SigningKey(seed).verify_key)
