"""Admission receipts (document 000, "what a control-plane outage actually does to admitted
work"): what an admitted claim hands the work it admits, and the bytes the host signs.

A receipt names the claim (pool, project, host), the snapshot it was admitted against
(``rulesetRev``, ``snapshotAgeMs``, ``degraded``), when and for how long (``admittedAt``,
``leaseMs``) and the authorization verdict; the host signs the RFC 8785 bytes of every field but
``signature`` with its Ed25519 key. Pure: building, reading strictly and the signed bytes; the
signature itself is the ``signing`` adapter's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...errors import MalformedError, ReceiptError
from .. import _parse as p
from ..canonical import canonical_bytes
from ..timestamps import check_timestamp

__all__ = [
    "DEFAULT_LEASE_MS",
    "MAX_LEASE_MS",
    "MAX_RECEIPT_BYTES",
    "RECEIPT_FIELDS",
    "Receipt",
    "parse_receipt",
]

#: A session's lease when the claim names none: renewed by every heartbeat.
DEFAULT_LEASE_MS: Final = 5 * 60 * 1000
#: The longest lease a claim may ask for (one day).
MAX_LEASE_MS: Final = 24 * 60 * 60 * 1000
#: A receipt file larger than this is not read.
MAX_RECEIPT_BYTES: Final = 64 * 1024

RECEIPT_FIELDS: Final = (
    "receiptId",
    "pool",
    "project",
    "hostId",
    "rulesetRev",
    "snapshotAgeMs",
    "degraded",
    "admittedAt",
    "leaseMs",
    "authorization",
    "signingKeyId",
)
_ID_CHARS: Final = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """One admitted claim, as signed (``signature`` is standard base64 of the Ed25519
    signature over :meth:`signed_bytes`; empty before signing)."""

    receipt_id: str
    pool: str
    project: str | None
    host_id: str
    ruleset_rev: str
    snapshot_age_ms: int
    degraded: bool
    admitted_at: str
    lease_ms: int
    authorization: Mapping[str, Any]
    signing_key_id: str
    signature: str = ""

    def signed_fields(self) -> dict[str, Any]:
        """Every field but the signature, by its JSON name."""
        return {
            "receiptId": self.receipt_id,
            "pool": self.pool,
            "project": self.project,
            "hostId": self.host_id,
            "rulesetRev": self.ruleset_rev,
            "snapshotAgeMs": self.snapshot_age_ms,
            "degraded": self.degraded,
            "admittedAt": self.admitted_at,
            "leaseMs": self.lease_ms,
            "authorization": dict(self.authorization),
            "signingKeyId": self.signing_key_id,
        }

    def signed_bytes(self) -> bytes:
        """The RFC 8785 bytes the host signs."""
        return canonical_bytes(self.signed_fields())

    def signature_bytes(self) -> bytes:
        """The raw signature. Raises: ReceiptError (``malformed``)."""
        try:
            raw = base64.b64decode(self.signature, validate=True)
        except (binascii.Error, ValueError) as e:
            raise ReceiptError("malformed", "signature is not standard base64") from e
        if len(raw) != 64:
            raise ReceiptError("malformed", "signature is not 64 bytes")
        return raw

    def with_signature(self, signature: bytes) -> Receipt:
        """This receipt carrying ``signature``."""
        return Receipt(
            **{**self._kwargs(), "signature": base64.b64encode(signature).decode("ascii")}
        )

    def _kwargs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the signed fields, then ``signature``."""
        return {**self.signed_fields(), "signature": self.signature}

    def to_bytes(self) -> bytes:
        """The receipt file: its JSON form, indented, newline-terminated."""
        return (json.dumps(self.to_dict(), indent=2, ensure_ascii=True) + "\n").encode("ascii")

    @classmethod
    def from_dict(cls, d: Any) -> Receipt:
        """Strict: exactly the receipt's fields, each of its type.

        Raises:
            ReceiptError: ``malformed``, naming the field.
        """
        if not isinstance(d, dict):
            raise ReceiptError("malformed", "a receipt is a JSON object")
        expected = {*RECEIPT_FIELDS, "signature"}
        unknown, missing = set(d) - expected, expected - set(d)
        if unknown or missing:
            raise ReceiptError(
                "malformed", f"fields: unknown {sorted(unknown)}, missing {sorted(missing)}"
            )

        def text(name: str, *, optional: bool = False) -> Any:
            value = d[name]
            if optional and value is None:
                return None
            if not isinstance(value, str) or not value or len(value) > 256:
                raise ReceiptError("malformed", f"{name} must be a string of 1..256 characters")
            return value

        def count(name: str, limit: int) -> int:
            value = d[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise ReceiptError("malformed", f"{name} must be an integer in 0..{limit}")
            return value

        receipt_id = text("receiptId")
        if not (receipt_id.startswith("rcpt_") and set(receipt_id[5:]) <= _ID_CHARS):
            raise ReceiptError("malformed", "receiptId must be rcpt_ and lowercase hex")
        if not isinstance(d["degraded"], bool):
            raise ReceiptError("malformed", "degraded must be a boolean")
        if not isinstance(d["authorization"], dict):
            raise ReceiptError("malformed", "authorization must be an object")
        if not isinstance(d["signature"], str):
            raise ReceiptError("malformed", "signature must be a string")
        admitted_at = text("admittedAt")
        try:
            check_timestamp(admitted_at)
        except MalformedError as e:
            raise ReceiptError("malformed", f"admittedAt: {e}") from e
        lease = count("leaseMs", MAX_LEASE_MS)
        if lease == 0:
            raise ReceiptError("malformed", "leaseMs must be positive")
        return cls(
            receipt_id=receipt_id,
            pool=text("pool"),
            project=text("project", optional=True),
            host_id=text("hostId"),
            ruleset_rev=text("rulesetRev"),
            snapshot_age_ms=count("snapshotAgeMs", 2**53 - 1),
            degraded=d["degraded"],
            admitted_at=admitted_at,
            lease_ms=lease,
            authorization=d["authorization"],
            signing_key_id=text("signingKeyId"),
            signature=d["signature"],
        )


def parse_receipt(data: bytes) -> Receipt:
    """A receipt file's bytes, read strictly (no duplicate keys, no NaN): the receipt itself
    (``host claim --receipt FILE``), or the claim's ``--json`` output, whose ``receipt`` member
    is the same receipt (what is signed is the receipt's fields, so either file verifies).

    Raises:
        ReceiptError: ``malformed`` (too large, not UTF-8 JSON, not a receipt, the output of
            a refused claim).
    """
    if len(data) > MAX_RECEIPT_BYTES:
        raise ReceiptError("malformed", f"larger than {MAX_RECEIPT_BYTES} bytes")
    try:
        doc = p.STRICT_DECODER.decode(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ReceiptError("malformed", f"not a JSON document: {e}") from e
    if isinstance(doc, dict) and "receiptId" not in doc and ("admitted" in doc or "receipt" in doc):
        # `rensei host claim --json`: the claim's record with the receipt inside
        if doc.get("receipt") is None:
            raise ReceiptError(
                "malformed",
                "the output of a refused claim (`host claim --json`, admitted: false) carries "
                "no receipt",
            )
        doc = doc["receipt"]
    return Receipt.from_dict(doc)
