"""Keys a verifier trusts and the checks made with them: a log's signature on a checkpoint and
a witness policy (witness keys and a quorum) over its cosignatures. Owns reading a key given on
a command line (a vkey, or a file holding a vkey or an ``ed25519:`` key) and binding it to a
checkpoint; the formats and the checks themselves are
:mod:`rensei_routing.core.audit.cosignature`'s. Must not print or touch a home.

Every refusal is a :class:`~rensei_routing.errors.WitnessError` whose verdict leads its message
(:func:`refusal` turns the core's :class:`~rensei_routing.errors.EvidenceError` into one):
``other-origin`` (the log vkey names another origin than the checkpoint's), ``wrong-key`` (no
signature of the trusted log key on the checkpoint), ``bad-signature`` (a line with a trusted
key's ID whose signature fails), ``quorum-not-met`` (fewer trusted witnesses cosigned than the
quorum), ``malformed`` (a key that is neither a vkey nor a key file).

A bare ``ed25519:`` key carries no name: as a log key it answers to the checkpoint's origin, as
a witness key to the name of the cosignature line whose key ID it gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .. import signing
from ..core.audit.cosignature import (
    PolicyResult,
    VerifierKey,
    WitnessPolicy,
    check_checkpoint,
    parse_vkey,
    verify_cosignature,
)
from ..core.audit.note import SIG_COSIGNATURE, SIG_ED25519, Checkpoint, note_key_id
from ..errors import CheckpointRejectedError, EvidenceError, KeyFormatError, WitnessError

__all__ = [
    "TrustedKey",
    "check_checkpoint_policy",
    "check_log_signature",
    "check_quorum",
    "load_key",
    "policy_for",
    "refusal",
    "refused",
    "valid_cosigners",
]

_MAX_KEY_TEXT: Final = 4096
#: The name a bare witness key is given when no line of the checkpoint carries its key ID.
_NO_LINE: Final = "unnamed"


def refusal(e: EvidenceError) -> WitnessError:
    """``e`` as a :class:`WitnessError` of the same verdict (its message led by the verdict)."""
    if isinstance(e, WitnessError):
        return e
    text = str(e)
    if text.startswith(e.verdict):
        text = text[len(e.verdict) :].lstrip(" :")
    return WitnessError(e.verdict, text)


@contextmanager
def refused() -> Iterator[None]:
    """Any :class:`EvidenceError` raised inside as its :func:`refusal`, chained to it."""
    try:
        yield
    except EvidenceError as e:
        raise refusal(e) from e


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustedKey:
    """A key given to a verifier: an Ed25519 public key, and the name its vkey gave it (``None``
    for a bare ``ed25519:`` key, which answers to any name)."""

    name: str | None
    public: signing.PublicKey
    source: str

    def as_log(self, origin: str) -> VerifierKey:
        """This key as the note signer of ``origin`` (its own name when it has one).

        Raises:
            WitnessError: ``malformed``: the origin cannot be a key name.
        """
        return _vkey(self.name or origin, self.public.raw, SIG_ED25519)

    def as_witness(self, cp: Checkpoint) -> VerifierKey:
        """This key as a cosigner of ``cp``: its own name, else the name of ``cp``'s line that
        carries its cosigner key ID."""
        if self.name is not None:
            return _vkey(self.name, self.public.raw, SIG_COSIGNATURE)
        for line in cp.signatures:
            if line.key_hash == note_key_id(line.name, SIG_COSIGNATURE, self.public.raw):
                return _vkey(line.name, self.public.raw, SIG_COSIGNATURE)
        return _vkey(_NO_LINE, self.public.raw, SIG_COSIGNATURE)


def _vkey(name: str, public: bytes, sig_type: int) -> VerifierKey:
    try:
        return VerifierKey(name=name, public_key=public, sig_type=sig_type)
    except KeyFormatError as e:
        raise WitnessError("malformed", f"{name!r}: {e}") from e


def load_key(arg: str, *, witness: bool = False) -> TrustedKey:
    """The key ``arg`` names: a file (holding a vkey or an ``ed25519:`` key) when one exists at
    that path, else a vkey. A log's key (``witness`` false) must be a note key (type 0x01); a
    witness's may be either type (its cosignatures carry the cosigner key ID either way).

    Raises:
        WitnessError: ``malformed``: not a vkey nor a key file, or a cosigner vkey given as a
            log's key.
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
    try:
        vkey = parse_vkey(text)
        public = signing.PublicKey(vkey.public_key)
    except KeyFormatError as e:
        raise WitnessError("malformed", f"{arg}: {e}") from e
    if not witness and vkey.sig_type != SIG_ED25519:
        raise WitnessError("malformed", f"{arg}: the vkey is not a log's note key (0x01)")
    return TrustedKey(name=vkey.name, public=public, source=arg)


def policy_for(
    cp: Checkpoint,
    trust: TrustedKey,
    witnesses: Sequence[TrustedKey] = (),
    quorum: int | None = None,
) -> WitnessPolicy:
    """The policy of ``trust`` (the log), ``witnesses`` and ``quorum`` (default: every
    witness), its keys bound to ``cp``'s names.

    Raises:
        WitnessError: ``malformed``: the origin cannot be a key name.
        InputError: the quorum is above the number of witnesses, or a witness is given twice.
    """
    return WitnessPolicy(
        log=trust.as_log(cp.origin),
        witnesses=tuple(w.as_witness(cp) for w in witnesses),
        quorum=quorum,
    )


def check_checkpoint_policy(
    cp: Checkpoint,
    trust: TrustedKey,
    witnesses: Sequence[TrustedKey] = (),
    quorum: int | None = None,
) -> PolicyResult:
    """Check ``cp`` under :func:`policy_for`'s policy.

    Raises:
        WitnessError: ``other-origin``, ``wrong-key``, ``bad-signature``, ``quorum-not-met``.
        InputError: the quorum is above the number of witnesses, or a witness is given twice.
    """
    policy = policy_for(cp, trust, witnesses, quorum)
    try:
        return check_checkpoint(cp, policy, signing.check_raw)
    except CheckpointRejectedError as e:
        raise refusal(e) from e


def check_log_signature(cp: Checkpoint, trust: TrustedKey) -> None:
    """Check that ``trust`` signed ``cp`` as its log (key name = origin).

    Raises:
        WitnessError: ``other-origin``, ``wrong-key`` or ``bad-signature``.
    """
    check_checkpoint_policy(cp, trust)


def valid_cosigners(cp: Checkpoint, witnesses: Sequence[TrustedKey]) -> tuple[int, ...]:
    """The indexes of the ``witnesses`` with a valid ``cosignature/v1`` on ``cp`` (lines of other
    keys, and lines that do not verify, are ignored)."""
    found: list[int] = []
    for i, w in enumerate(witnesses):
        try:
            if verify_cosignature(cp, w.as_witness(cp), signing.check_raw) is not None:
                found.append(i)
        except (CheckpointRejectedError, WitnessError):
            continue
    return tuple(found)


def check_quorum(cp: Checkpoint, witnesses: Sequence[TrustedKey], quorum: int | None) -> int:
    """How many of ``witnesses`` cosigned ``cp`` (its log signature is the caller's to check);
    at least ``quorum`` must (default: all).

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
