"""Proofs of this home's audit log a stranger can check with one public key: one record's
inclusion (a C2SP ``tlog-proof@v1`` file), two checkpoints' consistency (a tlog-witness
``add-checkpoint`` body), the witnesses' cosignatures kept beside the checkpoints they sign,
and the checks of all three with no home. Must not print; the formats and checks are
:mod:`..core.audit.tlog`'s and :mod:`..core.audit.cosignature`'s, the tree the store's
(:class:`..store.audit.AuditLog`).

Verdicts a check raises (:class:`~rensei_routing.errors.WitnessError`), besides the key checks
of :mod:`.policy` (``other-origin``, ``wrong-key``, ``bad-signature``, ``quorum-not-met``):
``malformed`` (the file), ``record-mismatch`` (the ``extra`` record is not the one at ``index``
or does not hash to its ``record_hash``), ``inclusion-failed`` (the path does not lead to the
checkpoint's root), ``old-size-mismatch`` (the consistency body starts from another size than
the OLD checkpoint), ``proof-for-other-checkpoint`` (its checkpoint is not NEW),
``inconsistent`` (the path does not join the two roots), ``unverified-cosignature`` (a line no
given witness key verifies over a stored checkpoint), ``no-checkpoint`` (nothing stored to
attach to or prove against).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import apsw

from .. import signing
from ..core.audit.archive import export_line, rows_from_lines
from ..core.audit.chain import verify_chain
from ..core.audit.note import Checkpoint, NoteSignature, parse_checkpoint, parse_signature_lines
from ..core.audit.tlog import (
    AddCheckpoint,
    TlogProof,
    check_consistent,
    parse_add_checkpoint,
    parse_tlog_proof,
    verify_tlog_proof,
)
from ..core.audit.treehead import form
from ..errors import CheckpointFormatError, WitnessError
from ..store.audit import AuditLog
from ..store.db import close_quietly, store_error
from ..store.home import Home
from ..store.witness import StoredCosignature, add_cosignatures, cosignatures_for
from .policy import TrustedKey, check_log_signature, policy_for, refused, valid_cosigners

__all__ = [
    "ProofVerdict",
    "add_cosignature_lines",
    "check_consistency",
    "consistency",
    "prove",
    "verify_proof",
    "with_cosignatures",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProofVerdict:
    """A proof that holds: what it proves, and how many trusted witnesses cosigned."""

    origin: str
    index: int
    size: int
    record_hash: str
    cosigners: int

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": "holds",
            "origin": self.origin,
            "index": self.index,
            "size": self.size,
            "record_hash": self.record_hash,
            "cosigners": self.cosigners,
        }


def _stored_lines(home: Home, cp: Checkpoint) -> tuple[str, ...]:
    conn = home.connect()
    try:
        return cosignatures_for(conn, cp.size, cp.body)
    except apsw.Error as e:
        raise store_error("cannot read cosignatures", e, home.db_path) from e
    finally:
        close_quietly(conn)


def with_cosignatures(home: Home, cp: Checkpoint) -> Checkpoint:
    """``cp`` carrying every cosignature stored for its body (those it carries kept once)."""
    lines = _stored_lines(home, cp)
    if not lines:
        return cp
    have = {s.to_line() for s in cp.signatures}
    extra = "".join(line for line in lines if line not in have)
    return parse_checkpoint(cp.to_text() + extra)


def _tree_checkpoint(log: AuditLog, cp: Checkpoint) -> bool:
    """Whether ``cp`` is of the tree-root form and its hash line the stored tree's root at its
    size (what an inclusion or consistency proof can reach)."""
    return (
        form(cp) == "tree-root"
        and 0 < cp.size <= log.tree_size()
        and cp.root == log.tree_root(cp.size)
    )


def _covering(log: AuditLog, seq: int) -> Checkpoint:
    """The latest stored tree checkpoint covering ``seq``, else a new one signed at the head."""
    for cp in sorted(log.checkpoints(), key=lambda c: c.size, reverse=True):
        if cp.size > seq and _tree_checkpoint(log, cp):
            return cp
    return _signed_tree_checkpoint(log)


def _signed_tree_checkpoint(log: AuditLog) -> Checkpoint:
    """A new checkpoint signed at the head, which must be a tree checkpoint."""
    cp = log.checkpoint()
    if not _tree_checkpoint(log, cp):
        raise WitnessError(
            "no-checkpoint",
            "this log signs head-hash checkpoints, which no inclusion proof can reach",
        )
    return cp


def prove(home: Home, seq: int) -> TlogProof:
    """The ``tlog-proof@v1`` of record ``seq``: its export line as ``extra``, its inclusion path,
    and the latest stored checkpoint that covers it (a new one signed and stored at the head when
    none does), carrying every cosignature stored for that checkpoint.

    Raises:
        NotFoundError: no record ``seq``.
        AuditError: a new checkpoint was needed and the log does not verify.
        StoreError, HomeError: the home is unusable.
    """
    with AuditLog.open(home) as log:
        record = log.get(seq)
        cp = _covering(log, seq)
        path = log.inclusion_proof(seq, cp.size)
    line = export_line(record).rstrip(b"\n")
    return TlogProof(
        index=seq, proof=tuple(path), checkpoint=with_cosignatures(home, cp), extra=line
    )


def _record_hash(proof: TlogProof) -> str:
    """The record hash of the ``extra`` record, checked to be the record at ``index``."""
    if proof.extra is None:
        raise WitnessError("record-mismatch", "the proof carries no record (no extra line)")
    try:
        text = proof.extra.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WitnessError("record-mismatch", "the extra record is not UTF-8") from e
    rows = list(rows_from_lines([text]))
    row = rows[0] if len(rows) == 1 else None
    if row is None or len(row) != 6 or row[0] != proof.index or not isinstance(row[2], str):
        raise WitnessError(
            "record-mismatch", f"the extra line is not the export line of record {proof.index}"
        )
    result = verify_chain(iter([row]), start_seq=proof.index, start_hash=row[2])
    if not result:
        raise WitnessError("record-mismatch", f"the extra record does not hash: {result.reason}")
    return str(row[4])


def verify_proof(
    data: bytes, trust: TrustedKey, witnesses: Sequence[TrustedKey], quorum: int | None
) -> ProofVerdict:
    """Check a proof file with no home: record -> leaf -> root -> the log's signature -> the
    witnesses' cosignatures (``quorum`` of them; default all).

    Raises:
        WitnessError: the verdicts of the module docstring.
    """
    with refused():
        proof = parse_tlog_proof(data)
    record_hash = _record_hash(proof)
    cp = proof.checkpoint
    policy = policy_for(cp, trust, witnesses, quorum)
    leaf = bytes.fromhex(record_hash.partition(":")[2])
    with refused():
        result = verify_tlog_proof(proof, leaf, policy, signing.check_raw)
    cosigners = len(result.cosigned)
    return ProofVerdict(
        origin=cp.origin,
        index=proof.index,
        size=cp.size,
        record_hash=record_hash,
        cosigners=cosigners,
    )


def _checkpoint_at(log: AuditLog, size: int) -> Checkpoint:
    for cp in sorted(log.checkpoints(), key=lambda c: c.size, reverse=True):
        if cp.size == size and _tree_checkpoint(log, cp):
            return cp
    if size == log.tree_size():
        cp = _signed_tree_checkpoint(log)
        if cp.size == size:
            return cp
    raise WitnessError(
        "no-checkpoint",
        f"no tree checkpoint of size {size:,} is stored (sign one at the head: rensei audit "
        "checkpoint)",
    )


def consistency(home: Home, old: int | Checkpoint, new: int | Checkpoint) -> AddCheckpoint:
    """The ``add-checkpoint`` body proving the log of size OLD a prefix of NEW, whose checkpoint
    is NEW's (a stored tree checkpoint of that size, or one signed at the head). OLD and NEW are
    sizes or checkpoints (whose roots must be this tree's).

    Raises:
        WitnessError: ``no-checkpoint``, ``inconsistent`` (OLD above NEW, or a checkpoint whose
            root is not this tree's at its size).
        StoreError, HomeError: the home is unusable.
    """
    with AuditLog.open(home) as log:
        for given in (old, new):
            if isinstance(given, Checkpoint) and not _tree_checkpoint(log, given):
                raise WitnessError(
                    "inconsistent",
                    f"the checkpoint of size {given.size:,} is not this log's tree at that size",
                )
        old_size = old.size if isinstance(old, Checkpoint) else old
        if isinstance(new, Checkpoint):
            check_log_signature(new, TrustedKey(name=None, public=home.public_key(), source="home"))
            new_cp = new
        else:
            new_cp = _checkpoint_at(log, new)
        if old_size > new_cp.size:
            raise WitnessError("inconsistent", f"OLD ({old_size:,}) is above NEW ({new_cp.size:,})")
        path = log.consistency_proof(old_size, new_cp.size)
    return AddCheckpoint(old_size=old_size, proof=tuple(path), checkpoint=new_cp)


def check_consistency(
    data: bytes, old: Checkpoint, new: int | Checkpoint | None, trust: TrustedKey
) -> AddCheckpoint:
    """Check an ``add-checkpoint`` body with no home: both checkpoints signed by ``trust``, the
    body from OLD's size to NEW (when given), the path joining the two roots.

    Raises:
        WitnessError: the verdicts of the module docstring.
    """
    with refused():
        body = parse_add_checkpoint(data)
    check_log_signature(old, trust)
    check_log_signature(body.checkpoint, trust)
    if body.old_size != old.size:
        raise WitnessError(
            "old-size-mismatch",
            f"the proof starts from size {body.old_size:,}, OLD is of size {old.size:,}",
        )
    if new is not None:
        same = (
            new.body == body.checkpoint.body
            if isinstance(new, Checkpoint)
            else new == body.checkpoint.size
        )
        if not same:
            raise WitnessError("proof-for-other-checkpoint", "the proof's checkpoint is not NEW")
    with refused():
        check_consistent(old, body.checkpoint, body.proof)
    return body


def add_cosignature_lines(
    home: Home, data: bytes, witnesses: Sequence[TrustedKey]
) -> list[tuple[int, str]]:
    """Keep the cosignature lines of ``data`` (a witness's output, or a cosigned checkpoint
    note: its signature lines are taken) beside the stored checkpoint each verifies over, by one
    of ``witnesses``; ``(size, line)`` of each line (already kept ones included). All or none:
    one line that verifies over no stored checkpoint stores nothing.

    Raises:
        WitnessError: ``malformed``, ``no-checkpoint``, ``unverified-cosignature``.
        StoreError, HomeError: the home is unusable.
    """
    with AuditLog.open(home) as log:
        stored = sorted(log.checkpoints(), key=lambda c: c.size, reverse=True)
    if not stored:
        raise WitnessError("no-checkpoint", "this log has no stored checkpoint to attach to")
    if b"\n\n" in data:  # a cosigned note: its signature lines
        data = data.split(b"\n\n", 1)[1]
    try:
        lines = parse_signature_lines(data)
    except CheckpointFormatError as e:
        raise WitnessError("malformed", f"not cosignature lines: {e}") from e
    found: list[StoredCosignature] = []
    for sig in lines:
        if sig.name == stored[0].origin:
            continue  # the log's own signature, in a cosigned note
        match = _signed_over(sig, stored, witnesses)
        if match is None:
            raise WitnessError(
                "unverified-cosignature",
                f"the line of {sig.name!r} is no valid cosignature, by any --witness key, of a "
                "stored checkpoint; nothing stored",
            )
        found.append(
            StoredCosignature(
                size=match.size,
                body=match.body,
                line=sig.to_line(),
                key_name=sig.name,
                key_hash=sig.key_hash,
            )
        )
    if not found:
        raise WitnessError("malformed", "no cosignature line")
    conn = home.connect(write=True)
    try:
        with conn:
            add_cosignatures(conn, found)
    except apsw.Error as e:
        raise store_error("cannot store cosignatures", e, home.db_path) from e
    finally:
        close_quietly(conn)
    return [(c.size, c.line) for c in found]


def _signed_over(
    sig: NoteSignature, stored: Sequence[Checkpoint], witnesses: Sequence[TrustedKey]
) -> Checkpoint | None:
    for cp in stored:
        if valid_cosigners(replace(cp, signatures=(sig,)), witnesses):
            return cp
    return None
