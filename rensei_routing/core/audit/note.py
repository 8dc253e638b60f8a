"""Checkpoint notes: the C2SP tlog-checkpoint / signed-note text format of the audit log's
checkpoints. Pure: parses and writes note text; signing and checking signatures belong to the
adapter (:mod:`rensei_routing.signing`), the link rules to :mod:`.chain`.

A note reads::

    <origin>
    <size>
    <base64 of the 32 head-hash bytes>

    — <key name> <base64(key hash ‖ signature)>

where the head hash is the ``record_hash`` of record ``size - 1`` (the genesis hash for size 0),
the key hash is the first 4 bytes of SHA-256(key name ‖ ``\\n`` ‖ 0x01 ‖ Ed25519 public key), and
the Ed25519 signature covers the note body (everything before the blank line, newline included).

Between the hash line and the blank line a note may carry C2SP extension lines, covered by the
signature like the rest of the body. This package writes one: :data:`STRICT_PAYLOADS`
(``payloads: strict-json``), the signer's statement that every payload below ``size`` was read as
strict JSON (UTF-8, no duplicate key, no ``NaN``/``Infinity``) and every ``recorded_at`` as RFC
3339 UTC before it signed. A verifier that trusts the key may then skip that parse below ``size``
(:func:`.chain.verify_chain` says when); a note without the line (made by an earlier release,
which did not always parse) vouches for the hashes only. Other extension lines are kept and
ignored.

The same note carries the Merkle tree's root (see :mod:`.merkle`) in a *tree checkpoint*: the
hash line is the root of the tree of the first ``size`` record hashes, not the head hash. The
layout is identical; :attr:`Checkpoint.root` gives the hash line's bytes in either form and
:func:`tree_checkpoint` builds a body from a root. Which form a stored note has is the store's
record, not the text's. :func:`note_key_id` computes the signed-note key ID of any signature
type (:data:`SIG_ED25519` for notes, :data:`SIG_COSIGNATURE` for tlog-cosignature/v1), and
:func:`parse_signature_lines` reads signature lines alone (a witness's reply).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from ...errors import CheckpointFormatError
from ..canonical import SHA256_PREFIX

__all__ = [
    "NOTE_MAX_BYTES",
    "SIG_COSIGNATURE",
    "SIG_ED25519",
    "STRICT_PAYLOADS",
    "Checkpoint",
    "NoteSignature",
    "bounded_text",
    "checkpoint_origin",
    "decode_b64",
    "note_key_hash",
    "note_key_id",
    "parse_checkpoint",
    "parse_signature_line",
    "parse_signature_lines",
    "tree_checkpoint",
]

NOTE_MAX_BYTES: Final = 16 * 1024
#: The extension line of a checkpoint whose signer parsed every payload below its size strictly.
STRICT_PAYLOADS: Final = "payloads: strict-json"
_MAX_SIGNATURES: Final = 64
_MAX_SIZE: Final = 2**63 - 1
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}")
_KEY_NAME = re.compile(r"[^\s+]+")
_SIG_PREFIX: Final = "\u2014 "
#: Signed-note signature type byte of an Ed25519 note signature.
SIG_ED25519: Final = 0x01
#: Signed-note signature type byte of a timestamped Ed25519 witness cosignature (cosignature/v1).
SIG_COSIGNATURE: Final = 0x04


def checkpoint_origin(org_id: str) -> str:
    """Origin line and signing key name of an org's audit log: ``rensei-routing/<org>/audit``."""
    return f"rensei-routing/{org_id}/audit"


def note_key_hash(key_name: str, public_key: bytes) -> bytes:
    """C2SP signed-note key hash of an Ed25519 key: SHA-256(name ‖ ``\\n`` ‖ 0x01 ‖ key)[:4]."""
    return note_key_id(key_name, SIG_ED25519, public_key)


def note_key_id(key_name: str, sig_type: int, public_key: bytes) -> bytes:
    """C2SP signed-note key ID: SHA-256(name ‖ ``\\n`` ‖ type byte ‖ key)[:4]."""
    return hashlib.sha256(
        key_name.encode("utf-8") + b"\n" + bytes([sig_type]) + public_key
    ).digest()[:4]


def tree_checkpoint(
    origin: str, size: int, root: bytes, extensions: tuple[str, ...] = ()
) -> Checkpoint:
    """An unsigned checkpoint whose hash line is ``root`` (a Merkle tree root, 32 bytes).

    Raises:
        CheckpointFormatError: the root is not 32 bytes, the size is out of range, or the
            origin or an extension line could not be parsed back.
    """
    if not isinstance(root, bytes) or len(root) != 32:
        raise CheckpointFormatError("checkpoint hash is not 32 bytes")
    cp = Checkpoint(
        origin=origin, size=size, head_hash=SHA256_PREFIX + root.hex(), extensions=extensions
    )
    _check_body(cp)
    return cp


@dataclass(frozen=True, slots=True, kw_only=True)
class NoteSignature:
    """One signature line of a note: key name, 4-byte key hash, raw signature."""

    name: str
    key_hash: bytes
    signature: bytes

    def to_line(self) -> str:
        """The ``— <name> <base64>`` line, newline included."""
        blob = base64.b64encode(self.key_hash + self.signature).decode("ascii")
        return f"{_SIG_PREFIX}{self.name} {blob}\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A checkpoint of a log: ``size`` records whose last ``record_hash`` is ``head_hash``."""

    origin: str
    size: int
    head_hash: str
    extensions: tuple[str, ...] = ()
    signatures: tuple[NoteSignature, ...] = ()

    @property
    def body(self) -> bytes:
        """The signed text: origin, size, base64 head hash, extensions, each ending in ``\\n``."""
        raw = bytes.fromhex(self.head_hash[len(SHA256_PREFIX) :])
        lines = [
            self.origin,
            str(self.size),
            base64.b64encode(raw).decode("ascii"),
            *self.extensions,
        ]
        return "".join(f"{line}\n" for line in lines).encode("utf-8")

    @property
    def root(self) -> bytes:
        """The 32 bytes of the hash line (a tree root or a head hash, as the form is)."""
        return bytes.fromhex(self.head_hash[len(SHA256_PREFIX) :])

    def to_text(self) -> str:
        """The whole note: body, blank line, signature lines."""
        return self.body.decode("utf-8") + "\n" + "".join(s.to_line() for s in self.signatures)

    def signature_by(self, name: str, key_hash: bytes) -> bytes | None:
        """The signature made by the named key with that key hash, if the note carries one."""
        for s in self.signatures:
            if s.name == name and s.key_hash == key_hash:
                return s.signature
        return None

    def with_signature(self, signature: NoteSignature) -> Checkpoint:
        """A copy carrying one more signature line."""
        return replace(self, signatures=(*self.signatures, signature))


def parse_checkpoint(note: str | bytes) -> Checkpoint:
    """Parse a C2SP-style checkpoint note (signatures are parsed, not checked).

    Raises:
        CheckpointFormatError: the text is too long, not UTF-8, lacks the blank line or a
            signature, or has a malformed origin, size, hash or signature line.
    """
    text = bounded_text(note, NOTE_MAX_BYTES, "checkpoint note")
    if any(c < " " and c != "\n" for c in text) or "\x7f" in text:
        raise CheckpointFormatError("checkpoint note contains control characters")
    if not text.endswith("\n"):
        raise CheckpointFormatError("checkpoint note must end with a newline")
    split = text.find("\n\n")
    if split < 0:
        raise CheckpointFormatError("checkpoint note has no blank line before its signatures")
    body_lines = text[:split].split("\n")
    sig_lines = text[split + 2 : -1].split("\n") if text[split + 2 :] else []
    if len(body_lines) < 3:
        raise CheckpointFormatError("checkpoint body needs origin, size and hash lines")
    origin, size_text, hash_text, *extensions = body_lines
    if not origin or origin != origin.strip():
        raise CheckpointFormatError("checkpoint origin line is empty or padded")
    if not _DECIMAL.fullmatch(size_text) or int(size_text) > _MAX_SIZE:
        raise CheckpointFormatError(f"checkpoint size is not a decimal count: {size_text!r}")
    head = decode_b64(hash_text, "checkpoint hash")
    if len(head) != 32:
        raise CheckpointFormatError("checkpoint hash is not 32 bytes")
    if any(not line for line in extensions):
        raise CheckpointFormatError("checkpoint has an empty extension line")
    if not sig_lines:
        raise CheckpointFormatError("checkpoint note carries no signature")
    if len(sig_lines) > _MAX_SIGNATURES:
        raise CheckpointFormatError("checkpoint note carries too many signatures")
    signatures = tuple(parse_signature_line(line) for line in sig_lines)
    return Checkpoint(
        origin=origin,
        size=int(size_text),
        head_hash=SHA256_PREFIX + head.hex(),
        extensions=tuple(extensions),
        signatures=signatures,
    )


def decode_b64(
    text: str, what: str, error: Callable[[str], Exception] = CheckpointFormatError
) -> bytes:
    """The bytes of canonical base64 ``text`` (padded, no other characters), as the signed-note
    formats write it.

    Raises:
        CheckpointFormatError: (or ``error``) not base64, or not canonical.
    """
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise error(f"{what} is not base64") from e
    if base64.b64encode(data).decode("ascii") != text:
        raise error(f"{what} is not canonical base64")
    return data


def bounded_text(
    data: str | bytes,
    limit: int,
    what: str,
    error: Callable[[str], Exception] = CheckpointFormatError,
) -> str:
    """``data`` as text: at most ``limit`` bytes of UTF-8.

    Raises:
        CheckpointFormatError: (or ``error``) longer than ``limit`` bytes, or not UTF-8.
    """
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    if len(raw) > limit:
        raise error(f"{what} longer than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} is not UTF-8") from e


def _check_body(cp: Checkpoint) -> None:
    """Refuse a body that :func:`parse_checkpoint` would not read back as itself."""
    placeholder = NoteSignature(name="x", key_hash=bytes(4), signature=bytes(1))
    if parse_checkpoint(cp.with_signature(placeholder).to_text()).body != cp.body:
        raise CheckpointFormatError("checkpoint body does not read back as written")


def parse_signature_lines(text: str | bytes) -> tuple[NoteSignature, ...]:
    """Parse note signature lines alone (each ``— <name> <base64>`` ending in a newline), as a
    witness returns them; at least one, at most as many as a note may carry.

    Raises:
        CheckpointFormatError: the text is too long, not UTF-8, empty, or a line is malformed.
    """
    decoded = bounded_text(text, NOTE_MAX_BYTES, "signature lines")
    if not decoded.endswith("\n") or any((c < " " and c != "\n") or c == "\x7f" for c in decoded):
        raise CheckpointFormatError("signature lines must be newline-terminated text")
    lines = decoded[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise CheckpointFormatError("too many signature lines")
    return tuple(parse_signature_line(line) for line in lines)


def parse_signature_line(line: str) -> NoteSignature:
    """Parse one ``— <name> <base64(key ID ‖ signature)>`` line (no newline).

    Raises:
        CheckpointFormatError: the line is malformed.
    """
    if not line.startswith(_SIG_PREFIX):
        raise CheckpointFormatError("checkpoint signature line must start with '— '")
    parts = line[len(_SIG_PREFIX) :].split(" ")
    if len(parts) != 2 or not _KEY_NAME.fullmatch(parts[0]):
        raise CheckpointFormatError("checkpoint signature line must be '— <name> <base64>'")
    blob = decode_b64(parts[1], "checkpoint signature")
    if len(blob) < 5:
        raise CheckpointFormatError("checkpoint signature is too short")
    return NoteSignature(name=parts[0], key_hash=blob[:4], signature=blob[4:])
