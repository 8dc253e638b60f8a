"""This home as a witness of another log, through files: check a checkpoint (and a consistency
proof from the last one cosigned for its origin), advance the stored view by compare-and-swap,
and cosign. Owns the order of those steps; the rule is :mod:`..core.audit.cosigner`'s, the view
store :mod:`..store.witness`'s. Must not print or read the clock (``now`` is an argument).

A request is checked against the view read in one snapshot, outside any lock, then the view is
swapped from exactly that view to the new checkpoint in one statement, and the cosignature is
made inside that write transaction (so a failure to sign writes nothing). When another request
moved the view between the read and the swap, nothing is written and the request is checked
again against the new view (which may now refuse it: a slower request for a smaller checkpoint
is ``backwards``, one whose proof starts from the old size is ``old-size-mismatch``). So
concurrent requests, from any number of processes, can never roll the view back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import apsw

from ..core.audit.cosignature import VerifierKey
from ..core.audit.cosignature import cosign as cosign_note
from ..core.audit.cosigner import View, check_request
from ..core.audit.note import SIG_COSIGNATURE, Checkpoint, NoteSignature, parse_checkpoint
from ..core.audit.tlog import parse_add_checkpoint
from ..errors import EvidenceError, WitnessError, WitnessRefusedError
from ..store.db import close_quietly, store_error
from ..store.home import Home
from ..store.witness import StoredView, advance, read_view
from .policy import TrustedKey, check_log_signature, refused

__all__ = ["CosignResult", "cosign", "witness_name", "witness_vkey"]

#: How many times a request is checked again after the view moved under it.
_ATTEMPTS: Final = 8


def witness_name(org: str) -> str:
    """The name a home cosigns under: ``rensei-routing/<org>/witness``."""
    return f"rensei-routing/{org}/witness"


def witness_vkey(home: Home) -> str:
    """The cosigner vkey of ``home`` (type 0x04, its witness name and host key).

    Raises:
        HomeError, StoreError: the home is unusable.
    """
    return VerifierKey(
        name=witness_name(home.info().org),
        public_key=home.public_key().raw,
        sig_type=SIG_COSIGNATURE,
    ).to_text()


@dataclass(frozen=True, slots=True, kw_only=True)
class CosignResult:
    """A cosignature made (its note signature line), and whether the view moved (``False``: the
    same checkpoint again)."""

    cosignature: NoteSignature
    origin: str
    size: int
    advanced: bool
    previous_size: int | None


def cosign(
    home: Home, checkpoint: bytes, *, proof: bytes | None, trust: TrustedKey, now: int
) -> CosignResult:
    """Cosign ``checkpoint`` (a signed note) as ``home``'s witness, at POSIX time ``now``.

    Raises:
        WitnessError: ``malformed`` (the checkpoint or the proof), ``other-origin``,
            ``wrong-key``, ``bad-signature`` (the log key), ``proof-for-other-checkpoint``.
        WitnessRefusedError: the cosigner's rule refused (``backwards``, ``conflict``, ...).
        HomeError, StoreError: the home is unusable. Nothing is written on any error.
    """
    try:
        cp = parse_checkpoint(checkpoint)
    except EvidenceError as e:
        raise WitnessError("malformed", f"the checkpoint: {e}") from e
    check_log_signature(cp, trust)
    old_size: int | None = None
    hashes: tuple[bytes, ...] = ()
    if proof is not None:
        with refused():
            body = parse_add_checkpoint(proof)
        if body.checkpoint.body != cp.body:
            raise WitnessError(
                "proof-for-other-checkpoint",
                f"the consistency proof ends at another checkpoint (size "
                f"{body.checkpoint.size:,}) than the one to cosign (size {cp.size:,})",
            )
        old_size, hashes = body.old_size, body.proof
    log_key = trust.as_log(cp.origin).to_text()
    root = cp.root
    key = home.private_key()
    name = witness_name(home.info().org)
    conn = home.connect(write=True)
    try:
        for _ in range(_ATTEMPTS):
            view = read_view(conn, cp.origin)
            held = (
                None if view is None else View(size=view.size, root=view.root, log_key=view.log_key)
            )
            check_request(
                held, size=cp.size, root=root, log_key=log_key, old_size=old_size, proof=hashes
            )
            line = cosign_note(
                cp, name=name, public_key=key.public_key.raw, timestamp=now, sign=key.sign
            )
            with conn:
                if advance(
                    conn,
                    view,
                    origin=cp.origin,
                    size=cp.size,
                    root=root,
                    log_key=log_key,
                    note=cp.to_text(),
                    cosigned_at=now,
                ):
                    return _result(cp, line, view)
        raise WitnessRefusedError(
            "busy", f"the view of {cp.origin!r} kept moving under this request; try again"
        )
    except apsw.Error as e:
        raise store_error("cannot store the witness view", e, home.db_path) from e
    finally:
        close_quietly(conn)


def _result(cp: Checkpoint, line: NoteSignature, view: StoredView | None) -> CosignResult:
    return CosignResult(
        cosignature=line,
        origin=cp.origin,
        size=cp.size,
        advanced=view is None or view.size != cp.size,
        previous_size=None if view is None else view.size,
    )
