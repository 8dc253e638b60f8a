"""Verifier keys, witness cosignatures and the trust policy a checkpoint is checked against.
Pure: no key material and no crypto here; a caller signs through a :data:`Sign` callback and
checks through a :data:`Check` callback (the ``signing`` adapter's Ed25519), so this module
only builds and reads the bytes.

* **Verifier keys** (:class:`VerifierKey`): ``<name>+<key ID, 8 hex>+<base64(type ‖ key)>`` as
  Go's ``sumdb/note`` writes a verifier key and C2SP signed-note calls a *vkey*. Type ``0x01``
  is an Ed25519 note key (a log's key: ``rensei keys show --vkey``), ``0x04`` an Ed25519
  cosigner key (tlog-cosignature). The key ID must be the one the name, type and key give.
* **Cosignatures** (C2SP tlog-cosignature, Ed25519 ``cosignature/v1``): the signed message is
  ``cosignature/v1\\n``, ``time <T>\\n`` and the checkpoint body; the note signature line is
  ``— <witness name> base64(key ID ‖ T as 8 big-endian bytes ‖ signature)``, the key ID
  computed with type byte ``0x04``. Any Ed25519 key may cosign: a witness home cosigns with
  its own note key, whose vkey (type ``0x01``) names it in a policy; the cosignature's key ID
  is still computed with ``0x04``.
* **Policy** (:class:`WitnessPolicy`): the log's key, witness keys and a quorum.
  :func:`check_checkpoint` verifies the log's signature and counts the witnesses whose
  cosignature verifies; signatures from keys the policy does not name are ignored, as the
  signed-note spec requires. Refusals are :class:`~rensei_routing.errors.CheckpointRejectedError`
  with a stable ``verdict``: ``other-origin`` (the origin line is not the log's),
  ``wrong-key`` (no signature by the trusted log key), ``bad-signature`` (a signature by a
  trusted key, log or witness, does not verify), ``quorum-not-met`` (fewer valid cosignatures
  than the quorum).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ...errors import CheckpointRejectedError, InputError, KeyFormatError
from .note import (
    SIG_COSIGNATURE,
    SIG_ED25519,
    Checkpoint,
    NoteSignature,
    decode_b64,
    note_key_id,
)

__all__ = [
    "COSIGNATURE_HEADER",
    "MAX_TIMESTAMP",
    "Check",
    "Cosignature",
    "PolicyResult",
    "Sign",
    "VerifierKey",
    "WitnessPolicy",
    "check_checkpoint",
    "cosign",
    "cosignature_message",
    "parse_vkey",
    "read_cosignature",
    "verify_cosignature",
]

#: Signs a message with the caller's Ed25519 key: returns the 64-byte signature.
Sign = Callable[[bytes], bytes]
#: ``check(raw 32-byte public key, message, signature)``: whether the Ed25519 signature holds.
Check = Callable[[bytes, bytes, bytes], bool]

COSIGNATURE_HEADER: Final = b"cosignature/v1\n"
MAX_TIMESTAMP: Final = 2**63 - 1
_ED25519_KEY: Final = 32
_ED25519_SIG: Final = 64
_KEY_NAME = re.compile(r"[^\s+]+")
_KEY_ID = re.compile(r"[0-9a-f]{8}")
_VKEY_MAX: Final = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifierKey:
    """A named Ed25519 public key and its signature type (:data:`~.note.SIG_ED25519` for a
    note signer, :data:`~.note.SIG_COSIGNATURE` for a cosigner)."""

    name: str
    public_key: bytes
    sig_type: int = SIG_ED25519

    def __post_init__(self) -> None:
        if not _KEY_NAME.fullmatch(self.name):
            raise KeyFormatError("a key name is non-empty, without spaces or '+'")
        if not isinstance(self.public_key, bytes) or len(self.public_key) != _ED25519_KEY:
            raise KeyFormatError("an Ed25519 public key is 32 bytes")
        if self.sig_type not in (SIG_ED25519, SIG_COSIGNATURE):
            raise KeyFormatError(f"unsupported verifier key type 0x{self.sig_type:02x}")

    @property
    def key_id(self) -> bytes:
        """The 4-byte key ID of this key as its type signs (the vkey's hex field)."""
        return note_key_id(self.name, self.sig_type, self.public_key)

    @property
    def note_key_id(self) -> bytes:
        """The key ID its signature on a note carries (type ``0x01``)."""
        return note_key_id(self.name, SIG_ED25519, self.public_key)

    @property
    def cosigner_key_id(self) -> bytes:
        """The key ID its cosignature/v1 line carries (type ``0x04``)."""
        return note_key_id(self.name, SIG_COSIGNATURE, self.public_key)

    def to_text(self) -> str:
        """``<name>+<8 hex digits>+<base64(type ‖ key)>``."""
        blob = base64.b64encode(bytes([self.sig_type]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_id.hex()}+{blob}"


def parse_vkey(text: str) -> VerifierKey:
    """Parse a verifier key (surrounding whitespace ignored).

    Raises:
        KeyFormatError: not three ``+``-separated fields, a malformed name, key ID or base64,
            an unsupported type, a key that is not 32 bytes, or a key ID that does not match.
    """
    if not isinstance(text, str) or len(text) > _VKEY_MAX:
        raise KeyFormatError("not a verifier key")
    parts = text.strip().split("+", 2)  # the base64 key may hold '+' itself
    if len(parts) != 3:
        raise KeyFormatError("a verifier key reads <name>+<key id>+<base64 key>")
    name, key_id, blob_text = parts
    if not _KEY_ID.fullmatch(key_id):
        raise KeyFormatError("a verifier key's key ID is 8 lowercase hex digits")
    blob = decode_b64(blob_text, "a verifier key's key", KeyFormatError)
    if not blob:
        raise KeyFormatError("a verifier key's key is empty")
    key = VerifierKey(name=name, public_key=blob[1:], sig_type=blob[0])
    if key.key_id.hex() != key_id:
        raise KeyFormatError("a verifier key's key ID does not match its name and key")
    return key


# -- cosignatures ------------------------------------------------------------------------------


def cosignature_message(body: bytes, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header, ``time <timestamp>`` and the checkpoint body."""
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"cosignature timestamp out of range: {timestamp}")
    return COSIGNATURE_HEADER + b"time %d\n" % timestamp + body


@dataclass(frozen=True, slots=True, kw_only=True)
class Cosignature:
    """One cosignature/v1 read from a note signature line."""

    name: str
    key_id: bytes
    timestamp: int
    signature: bytes

    def to_note_signature(self) -> NoteSignature:
        """The note signature line's parts: key ID, then timestamp and signature."""
        blob = self.timestamp.to_bytes(8, "big") + self.signature
        return NoteSignature(name=self.name, key_hash=self.key_id, signature=blob)


def read_cosignature(signature: NoteSignature) -> Cosignature | None:
    """The cosignature a note signature line carries, or ``None`` when it is not shaped like
    one (8 timestamp bytes and a 64-byte Ed25519 signature, timestamp at most 2**63 - 1)."""
    blob = signature.signature
    if len(blob) != 8 + _ED25519_SIG:
        return None
    timestamp = int.from_bytes(blob[:8], "big")
    if timestamp > MAX_TIMESTAMP:
        return None
    return Cosignature(
        name=signature.name, key_id=signature.key_hash, timestamp=timestamp, signature=blob[8:]
    )


def cosign(
    checkpoint: Checkpoint, *, name: str, public_key: bytes, timestamp: int, sign: Sign
) -> NoteSignature:
    """A cosignature/v1 line on ``checkpoint`` by the key ``public_key`` named ``name``, made at
    ``timestamp`` (POSIX seconds; the caller reads the clock), signed by ``sign``.

    Raises:
        KeyFormatError: the name or key is malformed.
    """
    key = VerifierKey(name=name, public_key=public_key)
    signature = sign(cosignature_message(checkpoint.body, timestamp))
    cosig = Cosignature(
        name=name, key_id=key.cosigner_key_id, timestamp=timestamp, signature=signature
    )
    return cosig.to_note_signature()


def verify_cosignature(checkpoint: Checkpoint, key: VerifierKey, check: Check) -> int | None:
    """The timestamp of ``key``'s valid cosignature on ``checkpoint``; ``None`` when the note
    carries no line with the key's name and cosigner key ID.

    Raises:
        CheckpointRejectedError: ``bad-signature``: a line by that key does not verify.
    """
    found = None
    for line in checkpoint.signatures:
        if line.name != key.name or line.key_hash != key.cosigner_key_id:
            continue
        cosig = read_cosignature(line)
        message = cosignature_message(checkpoint.body, cosig.timestamp) if cosig else b""
        if cosig is None or not check(key.public_key, message, cosig.signature):
            raise CheckpointRejectedError(
                "bad-signature", f"the cosignature by {key.name} does not verify"
            )
        found = cosig.timestamp if found is None else max(found, cosig.timestamp)
    return found


# -- policy ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WitnessPolicy:
    """Whom a checkpoint must be signed by: the log's key (its name is the origin unless
    ``origin`` says otherwise), witness keys, and how many of them must have cosigned
    (``quorum``; ``None``: every witness named).

    Raises:
        InputError: the quorum is negative or above the number of witnesses, or a witness is
            named twice.
    """

    log: VerifierKey
    witnesses: tuple[VerifierKey, ...] = ()
    quorum: int | None = None
    origin: str | None = None

    def __post_init__(self) -> None:
        q = self.required
        if not 0 <= q <= len(self.witnesses):
            raise InputError(f"quorum {q} is not between 0 and {len(self.witnesses)} witnesses")
        ids = {(w.name, w.public_key) for w in self.witnesses}
        if len(ids) != len(self.witnesses):
            raise InputError("a witness key is named twice")

    @property
    def required(self) -> int:
        """How many valid cosignatures a checkpoint needs."""
        return len(self.witnesses) if self.quorum is None else self.quorum

    @property
    def expected_origin(self) -> str:
        """The origin line a checkpoint must carry."""
        return self.log.name if self.origin is None else self.origin


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyResult:
    """A checkpoint that satisfied a policy: the witnesses whose cosignature verified, with the
    time each cosigned."""

    checkpoint: Checkpoint
    cosigned: tuple[tuple[str, int], ...]
    quorum: int

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        cp = self.checkpoint
        return {
            "origin": cp.origin,
            "size": cp.size,
            "root": base64.b64encode(cp.root).decode("ascii"),
            "cosigned": [{"name": n, "time": t} for n, t in self.cosigned],
            "quorum": self.quorum,
        }


def check_checkpoint(checkpoint: Checkpoint, policy: WitnessPolicy, check: Check) -> PolicyResult:
    """Verify ``checkpoint`` under ``policy``: the origin, the log's signature, then every
    cosignature by a witness the policy names (each witness counts once).

    Raises:
        CheckpointRejectedError: ``other-origin``, ``wrong-key``, ``bad-signature`` or
            ``quorum-not-met`` (see the module docstring).
    """
    expected = policy.expected_origin
    if checkpoint.origin != expected:
        raise CheckpointRejectedError(
            "other-origin", f"checkpoint of {checkpoint.origin!r}, expected {expected!r}"
        )
    log = policy.log
    log_lines = _lines_by(checkpoint.signatures, log.name, log.note_key_id)
    if not log_lines:
        raise CheckpointRejectedError("wrong-key", f"no signature by the trusted key of {log.name}")
    for line in log_lines:
        if not check(log.public_key, checkpoint.body, line.signature):
            raise CheckpointRejectedError(
                "bad-signature", f"the signature by {log.name} does not verify"
            )
    cosigned = []
    for witness in policy.witnesses:
        when = verify_cosignature(checkpoint, witness, check)
        if when is not None:
            cosigned.append((witness.name, when))
    if len(cosigned) < policy.required:
        raise CheckpointRejectedError(
            "quorum-not-met",
            f"{len(cosigned)} of the {policy.required} witness cosignatures required",
        )
    return PolicyResult(checkpoint=checkpoint, cosigned=tuple(cosigned), quorum=policy.required)


def _lines_by(signatures: Sequence[NoteSignature], name: str, key_id: bytes) -> list[NoteSignature]:
    return [s for s in signatures if s.name == name and s.key_hash == key_id]
