"""The transparency-log wire formats the CLI reads and writes: verifier keys (vkeys, C2SP
signed-note), Ed25519 cosignatures (C2SP tlog-cosignature, ``cosignature/v1``), the
``add-checkpoint`` body (C2SP tlog-witness) and the proof file (C2SP ``tlog-proof@v1``). Pure:
parses and writes text and the bytes to sign; signing and checking signatures belong to
:mod:`rensei_routing.signing`. Every parser is strict: anything malformed is a
:class:`~rensei_routing.errors.WitnessError` with verdict ``malformed``, never a traceback.

A vkey is ``<name>+<8 hex digits of key hash>+<base64(type byte ‖ 32-byte Ed25519 key)>``: type
``0x01`` for a note signer (the log: its key hash is :func:`.note.note_key_hash`), ``0x04`` for an
Ed25519 cosigner (key hash SHA-256(name ‖ ``\\n`` ‖ 0x04 ‖ key)[:4]).

A cosignature is a note signature line whose blob is the key hash, then an 8-byte big-endian
POSIX timestamp and the Ed25519 signature over :func:`cosignature_message`: ``cosignature/v1``,
``time <T>``, then the checkpoint body.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ...errors import CheckpointFormatError, WitnessError
from .merkle import HASH_SIZE, MAX_PROOF_HASHES
from .note import NOTE_MAX_BYTES, Checkpoint, NoteSignature, note_key_hash, parse_checkpoint

__all__ = [
    "ADD_CHECKPOINT_MAX_BYTES",
    "COSIGNATURE_TYPE",
    "NOTE_TYPE",
    "PROOF_HEADER",
    "AddCheckpoint",
    "Cosignature",
    "TlogProof",
    "VerifierKey",
    "cosignature_message",
    "cosigner_key_hash",
    "parse_add_checkpoint",
    "parse_cosignature",
    "parse_proof",
    "parse_vkey",
]

NOTE_TYPE: Final = 0x01
COSIGNATURE_TYPE: Final = 0x04
PROOF_HEADER: Final = "c2sp.org/tlog-proof@v1"
#: An add-checkpoint body or a proof file: the note and at most 64 hash lines, and the extra.
ADD_CHECKPOINT_MAX_BYTES: Final = NOTE_MAX_BYTES + (MAX_PROOF_HASHES + 2) * 64
PROOF_MAX_BYTES: Final = ADD_CHECKPOINT_MAX_BYTES + 2 * 1024 * 1024
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
_NAME = re.compile(r"[^\s+]+")
_MAX_INT64: Final = 2**63 - 1


def _malformed(message: str) -> WitnessError:
    return WitnessError("malformed", message)


def _b64(text: str, what: str) -> bytes:
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise _malformed(f"{what} is not base64") from e
    if base64.b64encode(data).decode("ascii") != text:
        raise _malformed(f"{what} is not canonical base64")
    return data


def _decimal(text: str, what: str) -> int:
    if not _DECIMAL.fullmatch(text) or int(text) > _MAX_INT64:
        raise _malformed(f"{what} is not a decimal number: {text[:40]!r}")
    return int(text)


def cosigner_key_hash(name: str, public_key: bytes) -> bytes:
    """The key hash of an Ed25519 cosigner: SHA-256(name ‖ ``\\n`` ‖ 0x04 ‖ key)[:4]."""
    return hashlib.sha256(name.encode("utf-8") + b"\n\x04" + public_key).digest()[:4]


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifierKey:
    """A vkey: a named Ed25519 key of one type (:data:`NOTE_TYPE` or :data:`COSIGNATURE_TYPE`)."""

    name: str
    key_type: int
    public_key: bytes

    @property
    def key_hash(self) -> bytes:
        """The 4-byte key hash signature lines carry."""
        if self.key_type == NOTE_TYPE:
            return note_key_hash(self.name, self.public_key)
        return cosigner_key_hash(self.name, self.public_key)

    def to_text(self) -> str:
        """``name+hash+base64`` as sumdb/note writes a verifier key."""
        blob = base64.b64encode(bytes([self.key_type]) + self.public_key).decode("ascii")
        return f"{self.name}+{self.key_hash.hex()}+{blob}"


def parse_vkey(text: str) -> VerifierKey:
    """Parse a vkey of an Ed25519 note signer or cosigner.

    Raises:
        WitnessError: ``malformed``: not ``name+hash+base64``, another key type, a key hash
            that does not match the name and key.
    """
    parts = text.strip().split("+", 2)
    if len(parts) != 3 or not _NAME.fullmatch(parts[0]) or len(text) > 1024:
        raise _malformed("a verifier key is name+hash+base64")
    name, hash_hex, blob = parts
    if not re.fullmatch(r"[0-9a-f]{8}", hash_hex):
        raise _malformed("a verifier key's hash is 8 lowercase hex digits")
    data = _b64(blob, "the verifier key")
    if len(data) != 33 or data[0] not in (NOTE_TYPE, COSIGNATURE_TYPE):
        raise _malformed("the verifier key is not an Ed25519 note (0x01) or cosigner (0x04) key")
    key = VerifierKey(name=name, key_type=data[0], public_key=data[1:])
    if key.key_hash.hex() != hash_hex:
        raise _malformed("the verifier key's hash does not match its name and key")
    return key


def cosignature_message(body: bytes, timestamp: int) -> bytes:
    """The bytes an Ed25519 cosigner signs over a checkpoint body at ``timestamp``."""
    return b"cosignature/v1\ntime %d\n" % timestamp + body


@dataclass(frozen=True, slots=True, kw_only=True)
class Cosignature:
    """One ``cosignature/v1`` line: who (name, key hash), when, the signature."""

    name: str
    key_hash: bytes
    timestamp: int
    signature: bytes

    def to_signature(self) -> NoteSignature:
        """The note signature line carrying it."""
        return NoteSignature(
            name=self.name,
            key_hash=self.key_hash,
            signature=self.timestamp.to_bytes(8, "big") + self.signature,
        )

    def to_line(self) -> str:
        """The ``— <name> <base64>`` line, newline included."""
        return self.to_signature().to_line()


def parse_cosignature(signature: NoteSignature) -> Cosignature | None:
    """The cosignature a note signature line carries, ``None`` when it cannot be one (its blob
    is not a timestamp and a 64-byte signature)."""
    blob = signature.signature
    if len(blob) != 72:
        return None
    timestamp = int.from_bytes(blob[:8], "big")
    if timestamp > _MAX_INT64:
        return None
    return Cosignature(
        name=signature.name,
        key_hash=signature.key_hash,
        timestamp=timestamp,
        signature=blob[8:],
    )


def _hashes(lines: Sequence[str]) -> tuple[bytes, ...]:
    if len(lines) > MAX_PROOF_HASHES:
        raise _malformed(f"more than {MAX_PROOF_HASHES} proof hashes")
    out = tuple(_b64(line, "a proof hash") for line in lines)
    if any(len(h) != HASH_SIZE for h in out):
        raise _malformed(f"a proof hash is not {HASH_SIZE} bytes")
    return out


def _text(data: bytes | str, limit: int, what: str) -> str:
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if len(raw) > limit:
        raise _malformed(f"{what} is longer than {limit:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _malformed(f"{what} is not UTF-8") from e


def _checkpoint(text: str) -> Checkpoint:
    try:
        return parse_checkpoint(text)
    except CheckpointFormatError as e:
        raise _malformed(f"its checkpoint: {e}") from e


@dataclass(frozen=True, slots=True, kw_only=True)
class AddCheckpoint:
    """An ``add-checkpoint`` body: a consistency proof from ``old_size`` to the checkpoint."""

    old_size: int
    proof: tuple[bytes, ...]
    checkpoint: Checkpoint

    def to_text(self) -> str:
        """``old N``, one base64 hash a line, a blank line, the checkpoint note."""
        lines = [f"old {self.old_size}", *(base64.b64encode(h).decode() for h in self.proof)]
        return "".join(f"{line}\n" for line in lines) + "\n" + self.checkpoint.to_text()


def parse_add_checkpoint(data: bytes | str) -> AddCheckpoint:
    """Parse an ``add-checkpoint`` body.

    Raises:
        WitnessError: ``malformed``: too long, not UTF-8, no ``old`` line, a hash that is not
            32 bytes of canonical base64, more than 63 hashes, a malformed checkpoint.
    """
    text = _text(data, ADD_CHECKPOINT_MAX_BYTES, "the consistency proof")
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise _malformed("the consistency proof has no blank line before its checkpoint")
    lines = head.split("\n")
    if not lines[0].startswith("old "):
        raise _malformed("the consistency proof must start with 'old N'")
    old = _decimal(lines[0][4:], "the old size")
    proof = _hashes(lines[1:])
    if len(proof) > 63:
        raise _malformed("more than 63 consistency proof hashes")
    return AddCheckpoint(old_size=old, proof=proof, checkpoint=_checkpoint(note))


@dataclass(frozen=True, slots=True, kw_only=True)
class TlogProof:
    """A ``c2sp.org/tlog-proof@v1`` file: leaf ``index``'s inclusion in the checkpoint's tree."""

    extra: bytes | None
    index: int
    proof: tuple[bytes, ...]
    checkpoint: Checkpoint

    def to_text(self) -> str:
        """The proof file's text."""
        lines = [PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode("ascii"))
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode("ascii") for h in self.proof)
        return "".join(f"{line}\n" for line in lines) + "\n" + self.checkpoint.to_text()


def parse_proof(data: bytes | str) -> TlogProof:
    """Parse a ``tlog-proof@v1`` file.

    Raises:
        WitnessError: ``malformed``: another header, no ``index`` line, a bad hash or extra,
            no blank line, a malformed checkpoint.
    """
    text = _text(data, PROOF_MAX_BYTES, "the proof")
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise _malformed("the proof has no blank line before its checkpoint")
    lines = head.split("\n")
    if lines[0] != PROOF_HEADER:
        raise _malformed(f"the proof's first line must be {PROOF_HEADER}")
    rest = lines[1:]
    extra = None
    if rest and rest[0].startswith("extra "):
        extra = _b64(rest.pop(0)[6:], "the extra data")
    if not rest or not rest[0].startswith("index "):
        raise _malformed("the proof has no 'index N' line")
    index = _decimal(rest[0][6:], "the index")
    return TlogProof(
        extra=extra, index=index, proof=_hashes(rest[1:]), checkpoint=_checkpoint(note)
    )
