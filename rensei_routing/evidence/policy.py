"""Keys a verifier trusts and the checks made with them: a log's signature on a checkpoint and
a witness policy (witness keys and a quorum) over its cosignatures. Owns reading a key given on
a command line (a vkey, or a file holding a vkey or an ``ed25519:`` key); the formats are
:mod:`rensei_routing.core.audit.transparency`'s. Must not print or touch a home.

Verdicts (:class:`~rensei_routing.errors.WitnessError`): ``other-origin`` (the log vkey names
another origin than the checkpoint's), ``wrong-key`` (no signature of the trusted log key on the
checkpoint), ``bad-signature`` (a line with the key's hash whose signature fails),
``quorum-not-met`` (fewer trusted witnesses cosigned than the quorum), ``malformed`` (a key that
is neither a vkey nor a key file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .. import signing
from ..core.audit.note import Checkpoint, note_key_hash
from ..core.audit.transparency import (
    NOTE_TYPE,
    VerifierKey,
    cosignature_message,
    cosigner_key_hash,
    parse_cosignature,
    parse_vkey,
)
from ..errors import KeyFormatError, WitnessError

__all__ = ["TrustedKey", "check_log_signature", "check_quorum", "load_key", "valid_cosigners"]

_MAX_KEY_TEXT: Final = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustedKey:
    """A key given to a verifier: an Ed25519 public key, and the name its vkey gave it (``None``
    for a bare ``ed25519:`` key, which answers to any name)."""

    name: str | None
    public: signing.PublicKey
    source: str

    def log_vkey(self, origin: str) -> str:
        """The note vkey of this key as the signer of ``origin``."""
        return VerifierKey(name=origin, key_type=NOTE_TYPE, public_key=self.public.raw).to_text()


def load_key(arg: str, *, key_type: int) -> TrustedKey:
    """The key ``arg`` names: a file (holding a vkey or an ``ed25519:`` key) when one exists at
    that path, else a vkey. A vkey must be of ``key_type`` (:data:`NOTE_TYPE` for a log,
    :data:`COSIGNATURE_TYPE` for a witness).

    Raises:
        WitnessError: ``malformed``: not a vkey nor a key file, or a vkey of another type.
        InputError: the file cannot be read.
    """
    text = arg
    path = Path(arg)
    if "+" not in arg or path.is_file():
        try:
            with open(path, "rb") as f:
                raw = f.read(_MAX_KEY_TEXT + 1)
        except OSError as e:
            raise WitnessError("malformed", f"{arg}: not a vkey, and {e.strerror}") from e
        text = raw.decode("utf-8", "replace").strip()
        if text.startswith("ed25519:"):
            try:
                return TrustedKey(name=None, public=signing.load_public_key(path), source=arg)
            except KeyFormatError as e:
                raise WitnessError("malformed", f"{arg}: {e}") from e
    vkey = parse_vkey(text)
    if vkey.key_type != key_type:
        want = "a log's note key (0x01)" if key_type == NOTE_TYPE else "a cosigner key (0x04)"
        raise WitnessError("malformed", f"{arg}: the vkey is not {want}")
    try:
        public = signing.PublicKey(vkey.public_key)
    except KeyFormatError as e:
        raise WitnessError("malformed", f"{arg}: {e}") from e
    return TrustedKey(name=vkey.name, public=public, source=arg)


def check_log_signature(cp: Checkpoint, key: TrustedKey) -> None:
    """Check that ``key`` signed ``cp`` as its log (key name = origin).

    Raises:
        WitnessError: ``other-origin``, ``wrong-key`` or ``bad-signature``.
    """
    if key.name is not None and key.name != cp.origin:
        raise WitnessError(
            "other-origin",
            f"the checkpoint is of origin {cp.origin!r}, the trusted key signs {key.name!r}",
        )
    sig = cp.signature_by(cp.origin, note_key_hash(cp.origin, key.public.raw))
    if sig is None:
        raise WitnessError(
            "wrong-key", f"the checkpoint of {cp.origin!r} carries no signature of the trusted key"
        )
    if not signing.check(key.public, cp.body, sig):
        raise WitnessError("bad-signature", "the log's signature on the checkpoint does not verify")


def valid_cosigners(cp: Checkpoint, witnesses: Sequence[TrustedKey]) -> tuple[int, ...]:
    """The indexes of the ``witnesses`` with a valid ``cosignature/v1`` on ``cp`` (lines of other
    keys, and lines that do not verify, are ignored)."""
    found: list[int] = []
    for i, w in enumerate(witnesses):
        for line in cp.signatures:
            if w.name is not None and line.name != w.name:
                continue
            if line.key_hash != cosigner_key_hash(line.name, w.public.raw):
                continue
            cosig = parse_cosignature(line)
            if cosig is None:
                continue
            message = cosignature_message(cp.body, cosig.timestamp)
            if signing.check(w.public, message, cosig.signature):
                found.append(i)
                break
    return tuple(found)


def check_quorum(cp: Checkpoint, witnesses: Sequence[TrustedKey], quorum: int | None) -> int:
    """How many of ``witnesses`` cosigned ``cp``; at least ``quorum`` must (default: all).

    Raises:
        WitnessError: ``quorum-not-met``.
    """
    need = len(witnesses) if quorum is None else quorum
    valid = valid_cosigners(cp, witnesses)
    if len(valid) < need:
        missing = [witnesses[i].source for i in range(len(witnesses)) if i not in valid]
        raise WitnessError(
            "quorum-not-met",
            f"{len(valid)} of the {len(witnesses)} trusted witnesses cosigned the checkpoint, "
            f"{need} needed (no valid cosignature: {', '.join(missing[:5])})",
        )
    return len(valid)
