"""Re-attesting the segment catalogue rows an earlier release wrote (``rensei audit reattest``).
Owns those re-signatures; must not sign a row it cannot check, and never runs by itself.

Verification holds every row of ``audit_segments`` to a statement of its kind signed by the host
key (:mod:`..core.audit.anchors`): a seal for a sealed segment, a prune statement (range, first
link, head, export SHA-256) for a pruned one. Rows sealed or pruned before statements existed
carry only a checkpoint of their head, which is also what a forged row carries, so they verify
as ``segment-unattested`` until this re-attests them:

* a **sealed** segment, whose records are still present: its note must be a checkpoint signed
  by the host key of exactly its size and head (through SHA-256 that pins every record up to the
  head), and its file must walk, with its own checkpoints, from the row's first seq and first
  link to exactly that head; its seal is then re-derived from the records and signed;
* a **pruned** segment, only with the export (``--exported FILE``): its note must be such a
  checkpoint, and the export must hold the segment, exactly as ``prune`` checks it (a chain that
  verifies, linking to the row's first link and reaching the signed head); its prune statement is
  then signed with the export's SHA-256. Without an export it is left as it is and reported.

Nothing else is ever signed: a row whose note is not a signed checkpoint of its head, or whose
records or export do not hold, is refused (``SegmentError``) and nothing is written. The rows
re-attested are written in one transaction, under the segments' lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import apsw

from ... import signing
from ...core.audit.chain import parse_checkpoint
from ...errors import SegmentError
from .attest import signed_head, unattested
from .chainwalk import _verify_sealed, host_signed
from .handle import LogHandle
from .rotation import _check_export, _statement, catalog_locked
from .segments import Segment

__all__ = ["Reattested", "reattest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Reattested:
    """What :func:`reattest` signed, and the pruned rows still waiting for their export."""

    resealed: tuple[Segment, ...] = ()
    attested: tuple[Segment, ...] = ()
    pending: tuple[Segment, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "resealed": [s.name for s in self.resealed],
            "attested": [s.to_dict() for s in self.attested],
            "pending": [s.name for s in self.pending],
        }


def reattest(
    log: LogHandle,
    *,
    exported: Sequence[Path] = (),
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
) -> Reattested:
    """Re-sign the catalogue rows no statement of their kind covers (see the module
    docstring): sealed ones from their records, pruned ones from ``exported``.

    Raises:
        SegmentError: a row's note is not a checkpoint of its head signed by the host key, a
            sealed segment's records do not walk to it, or the export does not hold a pruned
            one (nothing written).
        AuditError, HomeError: no public key or no usable signing key.
        StoreError: a database read or write failed (nothing written).
    """
    with catalog_locked(log, "the audit segments") as (public, key, catalog):
        todo = [s for s in catalog if unattested(s, log.origin, public) is not None]
        for seg in todo:
            why = signed_head(seg, log.origin, public)
            if why is not None:
                raise SegmentError(
                    f"refusing to re-attest {why}: nothing shows what its row asserts"
                )
        sealed = [s for s in todo if not s.pruned]
        pruned = [s for s in todo if s.pruned]
        for seg in sealed:
            _records_hold(log, seg, public, progress, workers)
        attest: list[Segment] = []
        if pruned and exported:
            digest = _check_export(exported, pruned)
            attest = [replace(s, export_sha256=digest) for s in pruned]
        signed = [replace(s, note=_statement(log, key, s)) for s in (*sealed, *attest)]
        if signed:
            writer = log._write_conn()
            try:
                with writer:
                    writer.executemany(
                        "UPDATE audit_segments SET note = ?, export_sha256 = ? "
                        "WHERE first_seq = ? AND last_seq = ? AND pruned = ?",
                        [
                            (s.note, s.export_sha256, s.first_seq, s.last_seq, int(s.pruned))
                            for s in signed
                        ],
                    )
            except apsw.Error as e:
                raise log._write_failed("cannot record the re-attestation", e) from e
    return Reattested(
        resealed=tuple(signed[: len(sealed)]),
        attested=tuple(signed[len(sealed) :]),
        pending=() if attest else tuple(pruned),
    )


def _records_hold(
    log: LogHandle,
    seg: Segment,
    public: signing.PublicKey,
    progress: Callable[[int], None] | None,
    workers: int | None,
) -> None:
    """A sealed segment's file walks from its row's first seq and link, with its own
    checkpoints and its (signed) note, to exactly its head.

    Raises:
        SegmentError: it does not (or its file is missing).
    """
    cps = [parse_checkpoint(seg.note)]
    result = _verify_sealed(
        log, seg, cps, seg.first_seq, seg.prev_hash, host_signed(log, public), progress, workers
    )
    if not result.ok:
        where = "-" if result.first_broken_seq is None else result.first_broken_seq
        raise SegmentError(
            f"refusing to re-seal segment {seg.name}: its records do not verify "
            f"(seq {where}: {result.reason}: {result.detail})"
        )
