"""Ruleset snapshots (document 000; SEMANTICS.md "Ruleset snapshot"): the envelope, its content
hash, the signed header, the verification order, and the rule that a host never goes back.

Pure: no I/O, no clock, no crypto library. Signing and signature checks are callables handed in
by the adapter (``rensei_routing.signing``), so every check here runs without files or keys
(the shape of TUF's trusted metadata set).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from ...errors import (
    CanonicalEncodingError,
    MalformedError,
    RollbackError,
    SnapshotFormatError,
    SnapshotVerificationError,
)
from .. import _parse as p
from ..canonical import canonical_bytes
from ..timestamps import check_timestamp
from ._wire import normalise_time
from ._wire import parse_time as _parse_time
from ._wire import scan_top as _scan_top

__all__ = [
    "ALGORITHM",
    "MAX_SNAPSHOT_BYTES",
    "SCOPE_HASH_ONLY",
    "SCOPE_HEADER",
    "SECTION_NAMES",
    "SIGNATURE_SCOPES",
    "RulesetSnapshot",
    "SignedHeader",
    "check_succession",
    "content_hash",
    "parse_snapshot",
    "seal",
    "section_digests",
    "valid_key_id",
    "verify_snapshot",
]

ALGORITHM: Final = "ed25519"
#: The five sections, in their canonical order (RFC 8785 sorts them anyway).
SECTION_NAMES: Final = (
    "policyBundle",
    "capacityProfiles",
    "poolHostInventory",
    "executionCellMatrix",
    "posteriorSummary",
)
#: Largest envelope a host reads (checked before parsing).
MAX_SNAPSHOT_BYTES: Final = 64 * 1024 * 1024
_MAX_REVISION: Final = 2**53 - 1
_ORG_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: A key id: an opaque string (ours is derived from the key, a platform's is any name).
_KEY_ID: Final = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: How far each signature of an envelope goes: ``header`` (our ``headerSignature`` over the
#: signed header) or ``hash-only`` (the daemon's ``signature`` over the 32 hash bytes alone).
SCOPE_HEADER: Final = "header"
SCOPE_HASH_ONLY: Final = "hash-only"
SIGNATURE_SCOPES: Final = (SCOPE_HEADER, SCOPE_HASH_ONLY)
_HEX_HASH: Final = re.compile(r"^[0-9a-f]{64}$")
_ENVELOPE_FIELDS: Final = frozenset(
    {
        "orgId",
        "revision",
        "rulesetRev",
        "contentHash",
        "signature",
        "signingKeyId",
        "algorithm",
        "compiledAt",
        "validators",
        "sections",
        "headerSignature",
        "sectionDigests",
    }
)
#: Envelope fields that may be absent: ``validators`` (the daemon carries it unchecked),
#: ``headerSignature`` (a hash-only signer has none), ``sectionDigests`` (carried, unchecked).
_OPTIONAL_FIELDS: Final = frozenset({"validators", "headerSignature", "sectionDigests"})

#: ``check(key_id, message, signature) -> bool``, or ``None`` when the key id is not trusted.
KeyLookup = Callable[[str], "Callable[[bytes, bytes], bool] | None"]


def content_hash(sections: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the RFC 8785 form of the object of the five sections (absent = null).

    Raises:
        SnapshotFormatError: a section name outside the five.
        CanonicalEncodingError: a section holds a value RFC 8785 cannot encode.
    """
    unknown = set(sections) - set(SECTION_NAMES)
    if unknown:
        raise SnapshotFormatError(f"unknown section(s): {', '.join(sorted(unknown))}")
    body = {name: sections.get(name) for name in SECTION_NAMES}
    return hashlib.sha256(canonical_bytes(body)).hexdigest()


def section_digests(sections: Mapping[str, Any]) -> dict[str, str]:
    """Each section's lowercase hex SHA-256 of its RFC 8785 form (absent = null): the
    envelope's ``sectionDigests`` (carried for inspection; the daemon does not check them).

    Raises:
        CanonicalEncodingError: a section holds a value RFC 8785 cannot encode.
    """
    return {
        name: hashlib.sha256(canonical_bytes(sections.get(name))).hexdigest()
        for name in SECTION_NAMES
    }


def valid_key_id(key_id: Any) -> bool:
    """Whether ``key_id`` is a key id: 1..128 of ``[A-Za-z0-9._:-]``."""
    return isinstance(key_id, str) and bool(_KEY_ID.fullmatch(key_id))


def hash_message(content_hash: str) -> bytes:
    """The 32 raw bytes of a hex content hash: what the daemon's ``signature`` is over."""
    return bytes.fromhex(content_hash)


def ruleset_rev(org_id: str, revision: int) -> str:
    """``{orgId}@{revision}``, the identifier a decision record and the CLI show."""
    return f"{org_id}@{revision}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedHeader:
    """Every envelope field that decides trust or age; the signature covers its RFC 8785 bytes
    (we go further than the reference, which signs the 32 hash bytes only)."""

    algorithm: str
    compiled_at: str
    content_hash: str
    org_id: str
    revision: int
    ruleset_rev: str
    signing_key_id: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "compiledAt": self.compiled_at,
            "contentHash": self.content_hash,
            "orgId": self.org_id,
            "revision": self.revision,
            "rulesetRev": self.ruleset_rev,
            "signingKeyId": self.signing_key_id,
        }

    def signed_bytes(self) -> bytes:
        """The exact bytes ``headerSignature`` is over (``signature`` is over the 32 raw
        content-hash bytes, :func:`hash_message`)."""
        return canonical_bytes(self.to_dict())


@dataclass(frozen=True, slots=True, kw_only=True)
class RulesetSnapshot:
    """A signed, versioned ruleset snapshot: the header, its two signatures, the validators that
    passed before it was published, and the five sections.

    ``validators`` is the envelope's one field no signature covers (SEMANTICS.md signs the
    header and, through the content hash, the sections). It is what the control side's own
    compile recorded: :func:`seal` sets it and the control store keeps it, but a snapshot
    verified from anywhere else carries ``()`` (:func:`verify_snapshot`), so a forged list is
    never kept or shown as if it were authentic. It is not part of a snapshot's identity
    (equality ignores it)."""

    header: SignedHeader
    #: The envelope's ``signature``: Ed25519 over the 32 raw content-hash bytes (the daemon's);
    #: for an envelope written before ``headerSignature`` existed, over the signed header.
    signature: bytes
    validators: tuple[str, ...] = field(compare=False)
    sections: Mapping[str, Any]
    #: ``headerSignature``: Ed25519 over the signed header (ours); ``None`` from a hash-only
    #: signer, and in an envelope written before it existed (whose ``signature`` is over it).
    header_signature: bytes | None = None
    #: ``sectionDigests`` as carried (``None`` when absent); never checked, never trusted.
    section_digests: Mapping[str, Any] | None = field(default=None, compare=False)
    #: What the signatures cover: ``header`` (compiledAt and revision signed) or ``hash-only``.
    signature_scope: str = field(default=SCOPE_HEADER, compare=False)

    @property
    def org_id(self) -> str:
        return self.header.org_id

    @property
    def revision(self) -> int:
        return self.header.revision

    @property
    def ruleset_rev(self) -> str:
        return self.header.ruleset_rev

    @property
    def content_hash(self) -> str:
        return self.header.content_hash

    @property
    def compiled_at(self) -> str:
        """``compiledAt`` normalised to RFC 3339 UTC ``...Z`` (our own form unchanged; one
        with an offset or more fraction digits rewritten, the signed text stays in
        ``header``)."""
        return normalise_time(self.header.compiled_at)

    def to_dict(self) -> dict[str, Any]:
        """The envelope as served (camelCase fields of SEMANTICS.md)."""
        out = self.header.to_dict()
        out["signature"] = base64.b64encode(self.signature).decode("ascii")
        if self.header_signature is not None:
            out["headerSignature"] = base64.b64encode(self.header_signature).decode("ascii")
        if self.section_digests is not None:
            out["sectionDigests"] = dict(self.section_digests)
        out["validators"] = list(self.validators)
        out["sections"] = {name: self.sections.get(name) for name in SECTION_NAMES}
        return out

    def to_bytes(self) -> bytes:
        """The exact served bytes: RFC 8785 of :meth:`to_dict` (stable, so an ETag and an
        exported file agree byte for byte)."""
        return canonical_bytes(self.to_dict())


def seal(
    *,
    org_id: str,
    revision: int,
    compiled_at: str,
    sections: Mapping[str, Any],
    signing_key_id: str,
    sign: Callable[[bytes], bytes],
    validators: tuple[str, ...] = (),
) -> RulesetSnapshot:
    """Hash the sections, build the signed header, and sign twice with the one key ``sign``
    holds: ``signature`` over the 32 raw hash bytes (what a Rensei daemon verifies) and
    ``headerSignature`` over the signed header's RFC 8785 bytes (what our hosts require, so
    ``compiledAt`` and ``revision`` cannot be edited); ``sectionDigests`` carries each
    section's SHA-256.

    Raises:
        SnapshotFormatError: an id, revision, timestamp or section that cannot be published.
    """
    _check_header_values(org_id, revision, signing_key_id)
    _check_time(compiled_at)
    unknown = set(sections) - set(SECTION_NAMES)
    if unknown:
        raise SnapshotFormatError(f"unknown section(s): {', '.join(sorted(unknown))}")
    full = {name: sections.get(name) for name in SECTION_NAMES}
    digest, digests = _hashes(full)
    header = SignedHeader(
        algorithm=ALGORITHM,
        compiled_at=compiled_at,
        content_hash=digest,
        org_id=org_id,
        revision=revision,
        ruleset_rev=ruleset_rev(org_id, revision),
        signing_key_id=signing_key_id,
    )
    return RulesetSnapshot(
        header=header,
        signature=sign(hash_message(header.content_hash)),
        header_signature=sign(header.signed_bytes()),
        section_digests=digests,
        validators=tuple(validators),
        sections=full,
    )


def _hashes(full: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The content hash and the section digests from one RFC 8785 encoding of each section:
    the object of the five is ``{"name":<bytes>,...}`` in sorted (ASCII) name order, exactly
    :func:`content_hash`'s input (a test checks they agree)."""
    parts = {name: canonical_bytes(full.get(name)) for name in SECTION_NAMES}
    body = b"{" + b",".join(b'"%s":%s' % (n.encode(), parts[n]) for n in sorted(parts)) + b"}"
    digests = {name: hashlib.sha256(parts[name]).hexdigest() for name in SECTION_NAMES}
    return hashlib.sha256(body).hexdigest(), digests


def _check_header_values(org_id: Any, revision: Any, key_id: Any) -> None:
    if not isinstance(org_id, str) or not _ORG_ID.match(org_id):
        raise SnapshotFormatError(f"orgId {org_id!r} is not a valid org id")
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise SnapshotFormatError("revision must be an integer")
    if not 1 <= revision <= _MAX_REVISION:
        raise SnapshotFormatError(f"revision {revision} is outside 1..2^53-1")
    if not valid_key_id(key_id):
        raise SnapshotFormatError(
            f"signingKeyId {key_id!r} is not a key id (1..128 of [A-Za-z0-9._:-])"
        )


def _check_time(compiled_at: Any) -> datetime:
    if not isinstance(compiled_at, str):
        raise SnapshotFormatError("compiledAt must be a string")
    try:
        check_timestamp(compiled_at)
    except MalformedError as e:
        raise SnapshotFormatError(f"compiledAt {compiled_at!r} is not RFC 3339 UTC") from e
    return datetime.fromisoformat(compiled_at[:-1] + "+00:00")


def compiled_moment(snapshot: RulesetSnapshot) -> datetime:
    """``compiledAt`` as an aware UTC datetime (checked when the snapshot was built or read)."""
    return _parse_time(snapshot.header.compiled_at)


def parse_snapshot(data: bytes) -> dict[str, Any]:
    """Step 1 (parse) and 2 (shape) of verification: bytes -> the envelope's fields, typed but
    not yet trusted.

    Raises:
        SnapshotFormatError: too large, not UTF-8 JSON, a duplicate key, NaN, or a missing,
            unknown or mistyped field.
    """
    return _parse(data)[0]


def _parse(data: bytes) -> tuple[dict[str, Any], str, dict[str, str]]:
    """:func:`parse_snapshot`, plus the sections' source text."""
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotFormatError(f"snapshot is larger than {MAX_SNAPSHOT_BYTES} bytes")
    try:
        doc, raw, section_texts = _scan_top(data.decode("utf-8"), "sections")
    except RecursionError as e:
        raise SnapshotFormatError("snapshot is not valid JSON: nested too deeply") from e
    except ValueError as e:  # UnicodeDecodeError, JSONDecodeError, duplicate keys
        raise SnapshotFormatError(f"snapshot is not valid JSON: {e}") from e
    missing = sorted(_ENVELOPE_FIELDS - _OPTIONAL_FIELDS - set(doc))
    if missing:
        raise SnapshotFormatError(f"snapshot is missing field(s): {', '.join(missing)}")
    unknown = sorted(set(doc) - _ENVELOPE_FIELDS)
    if unknown:
        raise SnapshotFormatError(f"snapshot has unknown field(s): {', '.join(unknown)}")
    for name in (
        "orgId",
        "rulesetRev",
        "contentHash",
        "signature",
        "signingKeyId",
        "algorithm",
        "compiledAt",
    ):
        if not isinstance(doc[name], str):
            raise SnapshotFormatError(f"{name} must be a string")
    if not isinstance(doc["sections"], dict):
        raise SnapshotFormatError("sections must be an object")
    doc.setdefault("validators", [])
    if "headerSignature" in doc and not isinstance(doc["headerSignature"], str):
        raise SnapshotFormatError("headerSignature must be a string")
    if "sectionDigests" in doc and not isinstance(doc["sectionDigests"], dict):
        raise SnapshotFormatError("sectionDigests must be an object")
    if not isinstance(doc["validators"], list) or not all(
        isinstance(v, str) for v in doc["validators"]
    ):
        raise SnapshotFormatError("validators must be an array of strings")
    _check_header_values(doc["orgId"], doc["revision"], doc["signingKeyId"])
    return doc, raw["sections"], section_texts


def verify_snapshot(
    data: bytes,
    *,
    lookup: KeyLookup,
    keep_validators: bool = False,
    scope_of: Callable[[str], str] | None = None,
) -> RulesetSnapshot:
    """Check a served envelope fully, in the order of SEMANTICS.md, before trusting any of it:
    parse, shape, algorithm, key id, ``rulesetRev``, content hash, key lookup (an unknown key
    is an error), the signatures, ``compiledAt`` (any offset, any fraction), then the sections.

    The signatures (one key): ``signature`` must verify over the 32 raw hash bytes (the
    daemon's rule) and ``headerSignature``, when present, over the signed header (reason
    ``header-signature`` when it does not). Without a ``headerSignature`` the envelope is
    hash-only, accepted only when ``scope_of(key_id)`` is ``hash-only`` (else refused
    ``header-signature-missing``; ``scope_of`` defaults to ``header`` for every key), and its
    ``compiledAt`` and ``revision`` are unsigned (``signature_scope`` says so). An envelope
    from before ``headerSignature`` existed (``signature`` over the header, nothing else) still
    verifies, with scope ``header``.

    ``lookup(key_id)`` returns a signature check for a trusted key, or ``None``. The
    envelope's ``validators`` list is shape-checked but not covered by the signature, so the
    result carries ``()`` unless ``keep_validators`` (only for the control side reading rows
    its own compile wrote): an unsigned claim is never kept as authentic.

    Raises:
        SnapshotFormatError: the bytes are not a well-formed envelope.
        SnapshotVerificationError: a check failed; ``reason`` is its code.
    """
    doc, raw_sections, section_texts = _parse(data)
    if doc["algorithm"] != ALGORITHM:
        raise SnapshotVerificationError(
            "algorithm", f"algorithm {doc['algorithm']!r} is not {ALGORITHM!r}"
        )
    key_id = doc["signingKeyId"]
    expected_rev = ruleset_rev(doc["orgId"], doc["revision"])
    if doc["rulesetRev"] != expected_rev:
        raise SnapshotVerificationError(
            "ruleset-rev", f"rulesetRev {doc['rulesetRev']!r} is not {expected_rev!r}"
        )
    if not _HEX_HASH.match(doc["contentHash"]):
        raise SnapshotVerificationError("content-hash", "contentHash is not 64 hex digits")
    sections = doc["sections"]
    try:
        actual = _sections_hash(raw_sections, doc["contentHash"])
    except SnapshotFormatError as e:
        raise SnapshotVerificationError("content-hash", str(e)) from e
    except CanonicalEncodingError as e:  # e.g. an integer beyond 2^53: cannot be hashed
        raise SnapshotVerificationError(
            "content-hash", f"sections cannot be canonicalised: {e}"
        ) from e
    if actual != doc["contentHash"]:
        raise SnapshotVerificationError(
            "content-hash", f"content hash {actual} does not match contentHash"
        )
    check = lookup(key_id)
    if check is None:
        raise SnapshotVerificationError("unknown-key", f"signing key {key_id} is not trusted")
    signature = _b64(doc["signature"], "signature")
    header = SignedHeader(
        algorithm=doc["algorithm"],
        compiled_at=doc["compiledAt"],
        content_hash=doc["contentHash"],
        org_id=doc["orgId"],
        revision=doc["revision"],
        ruleset_rev=doc["rulesetRev"],
        signing_key_id=key_id,
    )
    header_signature, scope = _check_signatures(
        doc, header, signature, check, SCOPE_HEADER if scope_of is None else scope_of(key_id)
    )
    if scope == SCOPE_HEADER and "sectionDigests" in doc:
        _check_digests(
            doc["sectionDigests"], sections, raw_sections, section_texts, doc["contentHash"]
        )
    try:
        _parse_time(doc["compiledAt"])
    except SnapshotFormatError as e:
        raise SnapshotVerificationError("compiled-at", str(e)) from e
    full = {name: sections.get(name) for name in SECTION_NAMES}
    validators = tuple(doc["validators"]) if keep_validators else ()
    return RulesetSnapshot(
        header=header,
        signature=signature,
        header_signature=header_signature,
        section_digests=doc.get("sectionDigests"),
        signature_scope=scope,
        validators=validators,
        sections=full,
    )


def _check_digests(
    declared: Any,
    sections: Mapping[str, Any],
    raw: str,
    section_texts: Mapping[str, str],
    content_hash: str,
) -> None:
    """Our native rule beyond the daemon's (which carries ``sectionDigests`` unchecked): in a
    header-signed envelope the digests must be each section's SHA-256, so an unsigned field
    edited in place is refused like a signed one (a hash-only envelope's are carried as they
    are: a platform may compute them its own way). Canonical sections text (what we serve) is
    split as it arrived; any other is re-encoded.

    Raises:
        SnapshotVerificationError: ``section-digests``.
    """
    texts: Mapping[str, str] = {}
    if hashlib.sha256(raw.encode("utf-8")).hexdigest() == content_hash:
        texts = section_texts
    expected = {
        name: hashlib.sha256(texts[name].encode("utf-8")).hexdigest()
        if name in texts
        else hashlib.sha256(canonical_bytes(sections.get(name))).hexdigest()
        for name in SECTION_NAMES
    }
    if declared != expected:
        raise SnapshotVerificationError(
            "section-digests", "sectionDigests do not match the sections' SHA-256"
        )


def _b64(text: str, name: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SnapshotVerificationError("signature", f"{name} is not standard base64") from e


def _check_signatures(
    doc: Mapping[str, Any],
    header: SignedHeader,
    signature: bytes,
    check: Callable[[bytes, bytes], bool],
    trusted_scope: str,
) -> tuple[bytes | None, str]:
    """``(headerSignature, signature scope)`` of a verified envelope (see
    :func:`verify_snapshot`).

    Raises:
        SnapshotVerificationError: ``signature``, ``header-signature`` or
            ``header-signature-missing``.
    """
    key_id = header.signing_key_id
    hash_ok = check(hash_message(header.content_hash), signature)
    if "headerSignature" in doc:
        if not hash_ok:
            raise SnapshotVerificationError(
                "signature", f"signature does not verify over the content hash under key {key_id}"
            )
        header_signature = _b64(doc["headerSignature"], "headerSignature")
        if not check(header.signed_bytes(), header_signature):
            raise SnapshotVerificationError(
                "header-signature", f"headerSignature does not verify under key {key_id}"
            )
        return header_signature, SCOPE_HEADER
    if hash_ok:
        if trusted_scope != SCOPE_HASH_ONLY:
            raise SnapshotVerificationError(
                "header-signature-missing",
                f"snapshot has no headerSignature and key {key_id} is trusted with scope "
                f"{trusted_scope!r} (its compiledAt and revision would be unsigned; trust the "
                f"key with --scope hash-only to accept it)",
            )
        return None, SCOPE_HASH_ONLY
    if "sectionDigests" not in doc and check(header.signed_bytes(), signature):
        return None, SCOPE_HEADER  # an envelope from before headerSignature: header-signed
    raise SnapshotVerificationError("signature", f"signature does not verify under key {key_id}")


def _sections_hash(raw: str, declared: str) -> str:
    """The content hash of sections that arrived as ``raw`` text. Served and exported
    snapshots are RFC 8785 bytes, so the sections' text is their canonical form and hashing it
    as it arrived is enough (the hash matching proves these are the signed bytes); otherwise
    (e.g. a pretty-printed copy) the sections are parsed strictly and re-encoded.

    Raises:
        SnapshotFormatError: an unknown section or a duplicate key.
        CanonicalEncodingError: a value RFC 8785 cannot encode.
    """
    fast = hashlib.sha256(raw.encode("utf-8")).hexdigest()
    if fast == declared:
        return fast
    try:
        sections = p.STRICT_DECODER.decode(raw)
    except RecursionError as e:
        raise SnapshotFormatError("sections are nested too deeply") from e
    except ValueError as e:
        raise SnapshotFormatError(f"sections are not valid JSON: {e}") from e
    return content_hash(sections)


def check_succession(current: RulesetSnapshot | None, candidate: RulesetSnapshot) -> bool:
    """Whether ``candidate`` replaces ``current``: a newer revision of the same org does, and
    so does the held revision with the same content re-sealed at a later ``compiledAt`` (the
    control side's heartbeat: still current as of then). The same copy, or an older seal of
    it, is ``False`` (nothing to do). We go further than the reference daemon, which adopts
    any verified snapshot.

    Raises:
        RollbackError: another org, an older revision, or the same revision with another hash
            (rollback or equivocation).
    """
    if current is None:
        return True
    if candidate.org_id != current.org_id:
        raise RollbackError(
            f"snapshot is for org {candidate.org_id!r}, the host holds {current.org_id!r}"
        )
    if candidate.revision < current.revision:
        raise RollbackError(
            f"refusing {candidate.ruleset_rev}: older than the held {current.ruleset_rev}"
        )
    if candidate.revision == current.revision:
        if candidate.content_hash != current.content_hash:
            raise RollbackError(
                f"refusing {candidate.ruleset_rev}: same revision as the held copy with another "
                f"content hash (equivocation)"
            )
        return compiled_moment(candidate) > compiled_moment(current)
    return True
