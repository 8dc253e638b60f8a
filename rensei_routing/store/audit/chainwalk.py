"""Verifying the audit chain across its segments (see :mod:`.segments` for the layout): from
the anchor, every sealed segment present, in order, then the live table. Owns no table; the
walk itself is :mod:`.parallel`'s and the rules the core's.

What each step proves: every catalogue row must follow the one before it (its first seq and
first ``prev_hash``; the first row starts at seq 0 from the genesis hash) and carry a statement
of its kind signed by the host key that names exactly its range, first link and head
(:mod:`..core.audit.anchors`): a seal for a sealed segment, a prune statement (with the
export's SHA-256) for a pruned one. A row no such statement covers is ``segment-unattested`` at
the first seq it claims, never an anchor. A pruned row is then an anchor (the walk starts at
its head); a sealed segment's records (with every checkpoint it holds, the seal among them) must
walk from the previous head to exactly its seal; the live table then walks from the newest
head with the home's stored checkpoints. The verdict's counts and head are a single walk's from
the anchor; :attr:`ChainVerdict.records` counts the records present. A given checkpoint whose
size falls strictly inside a pruned segment cannot be held to records no longer present: it is
listed in :attr:`ChainVerdict.unverifiable`, not passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import apsw

from ... import signing
from ...core.audit import merkle
from ...core.audit.chain import (
    GENESIS_HASH,
    Checkpoint,
    VerifyResult,
    note_key_hash,
    parse_checkpoint,
)
from ...core.audit.treehead import chain_head, form, root_of
from ...core.audit.verdict import broken
from ...errors import AuditError, CheckpointFormatError, TreeError
from .. import parallel, treecheck
from ..db import store_error
from . import tree
from .attest import unattested
from .handle import LogHandle
from .recovery import recover
from .segments import Segment, read_catalog
from .tree import TreeCheck

__all__ = [
    "ChainVerdict",
    "seals",
    "stored_checkpoints",
    "verify_all",
    "verify_live",
]


# -- verification ---------------------------------------------------------------------------------


def stored_checkpoints(conn: apsw.Connection) -> list[Checkpoint]:
    """The checkpoints stored in ``conn``'s database, smallest first.

    Raises:
        CheckpointFormatError: a stored note no longer parses (named by its id).
        apsw.Error: the table cannot be read.
    """
    rows = conn.execute("SELECT id, note FROM audit_checkpoints ORDER BY size, id").fetchall()
    out = []
    for cp_id, note in rows:
        try:
            out.append(parse_checkpoint(str(note)))
        except CheckpointFormatError as e:
            raise CheckpointFormatError(f"checkpoint {cp_id}: {e}") from e
    return out


def host_signed(log: LogHandle, public: signing.PublicKey) -> Callable[[Checkpoint], bool]:
    """Whether a checkpoint carries a valid signature of ``log``'s origin by the host key
    ``public`` (what every walk of this log holds its checkpoints and seals to)."""
    key_hash = note_key_hash(log.origin, public.raw)

    def signature_ok(cp: Checkpoint) -> bool:
        sig = cp.signature_by(log.origin, key_hash)
        return sig is not None and signing.check(public, cp.body, sig)

    return signature_ok


def seals(conn: apsw.Connection) -> list[Checkpoint]:
    """The seal of every catalogued segment (sealed or pruned), oldest first.

    Raises:
        CheckpointFormatError: a seal no longer parses.
        apsw.Error: the catalogue cannot be read.
    """
    return [parse_checkpoint(s.note) for s in read_catalog(conn)]


def verify_live(
    log: LogHandle,
    conn: apsw.Connection,
    checkpoints: Sequence[Checkpoint],
    stored: bool,
    progress: Callable[[int], None] | None,
    public: signing.PublicKey | None,
    workers: int | None = None,
    start: tuple[int, str] = (0, GENESIS_HASH),
    tree_work: parallel.TreeWork | None = None,
) -> VerifyResult:
    """The live table's part of :func:`verify_all` from ``start`` (the newest segment's head,
    or genesis), inside a read transaction the caller holds on ``conn``: ``checkpoints`` and
    (with ``stored``) the home's stored ones, then the rows (:func:`.parallel.walk`, checking
    the tree's leaves of them with ``tree_work``).

    Raises:
        AuditError: checkpoints must be checked but there is no public key.
        apsw.Error, StoreError: the rows could not be read.
    """
    cps = list(checkpoints)
    if stored and public is not None:
        try:
            cps.extend(stored_checkpoints(conn))
        except CheckpointFormatError as e:
            return VerifyResult(
                ok=False,
                records_checked=0,
                reason="checkpoint-signature-invalid",
                detail=f"a stored checkpoint is unreadable: {e}",
            )
    if cps and public is None:
        raise AuditError("no public key to check checkpoints with")
    return parallel.walk(
        conn,
        log._path,
        cps,
        origin=log.origin,
        signature_ok=None if public is None or not cps else host_signed(log, public),
        progress=progress,
        workers=workers,
        options=log._options,
        start_seq=start[0],
        start_hash=start[1],
        tree=tree_work,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainVerdict:
    """What a walk over every segment proved: the verdict (counts and head as a single walk's
    from the anchor), where it began, and the segments it walked or started after."""

    result: VerifyResult
    first_seq: int = 0
    sealed: tuple[Segment, ...] = ()
    pruned: tuple[Segment, ...] = ()
    #: ``(size, segment name)`` of each given checkpoint whose size falls strictly inside a
    #: pruned segment: its signature held, but no record it covers is held any more.
    unverifiable: tuple[tuple[int, str], ...] = ()
    #: What the check of the tree found (``None``: the chain did not hold, it was not run).
    tree: TreeCheck | None = None
    #: ``(size, form)`` of every checkpoint checked, smallest first (:mod:`...treehead`).
    forms: tuple[tuple[int, str], ...] = ()

    @property
    def anchor(self) -> Segment | None:
        """The newest pruned segment: the walk began at its head."""
        return self.pruned[-1] if self.pruned else None

    @property
    def segments(self) -> int:
        """Segments walked: the sealed ones present and the live one."""
        return len(self.sealed) + 1

    @property
    def records(self) -> int:
        """Records walked (those present, from :attr:`first_seq`)."""
        return max(0, self.result.records_checked - self.first_seq)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the single walk's fields, then where it began and what it walked."""
        anchor = self.anchor
        return {
            **self.result.to_dict(),
            "first_seq": self.first_seq,
            "records_present": self.records,
            "segments": self.segments,
            "sealed": [s.name for s in self.sealed],
            "unverifiable": [{"size": n, "segment": name} for n, name in self.unverifiable],
            "tree": None if self.tree is None else self.tree.to_dict(),
            "checkpoints": [{"size": n, "form": f} for n, f in self.forms],
            "anchor": None
            if anchor is None
            else {
                "seq": anchor.last_seq + 1,
                "head_hash": anchor.head_hash,
                "pruned": [s.name for s in self.pruned],
                "checkpoint": anchor.note,
            },
        }


def verify_all(
    log: LogHandle,
    checkpoints: Sequence[Checkpoint],
    *,
    stored: bool,
    progress: Callable[[int], None] | None,
    public: signing.PublicKey | None,
    workers: int | None = None,
    tree: bool = True,
) -> ChainVerdict:
    """Verify the chain: from the anchor (the newest pruned segment's signed head, or genesis),
    every sealed segment present in order (its seal's signature, its first ``prev_hash`` equal
    to the previous head, its records, its own checkpoints and the seal at its head), then the
    live table from the last head. ``checkpoints`` are held to the segment their size falls
    in; one inside the pruned stretch has its signature checked and, at the anchor's size, its
    head compared. The verdict's counts and head are a single walk's from the anchor.
    ``tree=False`` walks the chain alone (:attr:`ChainVerdict.tree` stays ``None``): the
    benchmarks' baseline, the verification as it was before the tree.

    Raises:
        AuditError: segments or checkpoints must be checked but there is no public key.
        StoreError: a database could not be read.
    """
    if not log.read_only:
        recover(log)
    conn = log._read_conn()
    with conn:
        work = parallel.TreeWork(conn, log._path) if tree else None
        verdict = _walk_all(log, conn, checkpoints, stored, progress, public, workers, work)
        if verdict.result.ok and work is not None:
            verdict = _with_tree(log, conn, verdict, checkpoints, stored, work)
    return verdict


def _with_tree(
    log: LogHandle,
    conn: apsw.Connection,
    verdict: ChainVerdict,
    given: Sequence[Checkpoint],
    stored: bool,
    work: parallel.TreeWork,
) -> ChainVerdict:
    """The chain held: the tree as the walk's ranges found it, recomputed from the rows they
    read (:func:`_found`), then every tree-root checkpoint (given, stored, seals, those in
    sealed segments) held to the tree's root at its size. Its signature was checked by the
    walk."""
    result = verdict.result
    notes = list(given) + seals(conn)
    if stored:
        notes += stored_checkpoints(conn)
        for seg in verdict.sealed:
            notes += stored_checkpoints(log._sealed.conn(seg))
    unique = {c.to_text(): c for c in notes}
    cps = sorted(unique.values(), key=lambda c: c.size)
    claimed = max((c.size for c in cps if root_of(c) is not None), default=0)
    found = tree.precheck(conn, verdict.first_seq, result.records_checked, claimed)
    if found is None:
        found = _found(conn, work, verdict)
    if found is None:  # not reached by the walk's ranges: recomputed here, in one process
        found = tree.check(conn, log._sealed, verdict.first_seq, result.records_checked, claimed)
    if not found.ok:
        seq = found.first_bad_seq
        failed = broken(seq or 0, seq, found.state, found.detail, result.head_hash)  # type: ignore[arg-type]
        return replace(verdict, result=failed, tree=found)
    read = tree.reader(conn)
    for cp in cps:
        root = root_of(cp)
        if root is None or found.state != "ok" or cp.size > found.size:
            continue
        try:
            mine = merkle.tree_hash(cp.size, read)
        except TreeError as e:
            mine = str(e).encode()
        if mine != root:
            seq = max(0, cp.size - 1)
            failed = broken(
                seq,
                seq,
                "checkpoint-root-mismatch",
                f"the checkpoint of size {cp.size} states a root that is not the tree's",
                result.head_hash,
            )
            return replace(verdict, result=failed, tree=found)
    return replace(verdict, tree=found, forms=tuple((c.size, form(c)) for c in cps))


def _found(
    conn: apsw.Connection, work: parallel.TreeWork, verdict: ChainVerdict
) -> TreeCheck | None:
    """The tree's verdict from the outcomes of the walk's ranges (in seq order, from the first
    seq present): the first failure (exactly the one-process check's, see :mod:`..treecheck`),
    or ``ok`` when every leaf present was checked; ``None`` when they do not settle it."""
    leaves = 0
    for outcome in work.outcomes:
        state, count, _detail = outcome
        if state == "unchecked":
            return None
        if state != "ok":
            return treecheck.failure(outcome)
        leaves += count or 0
    if leaves != verdict.records:
        return None
    return tree.conclude(conn, verdict.first_seq + leaves)


def _walk_all(
    log: LogHandle,
    conn: apsw.Connection,
    checkpoints: Sequence[Checkpoint],
    stored: bool,
    progress: Callable[[int], None] | None,
    public: signing.PublicKey | None,
    workers: int | None,
    work: parallel.TreeWork | None = None,
) -> ChainVerdict:
    """:func:`verify_all` in the read transaction the caller holds on the home."""
    catalog = read_catalog(conn)
    if not catalog:
        return ChainVerdict(
            result=verify_live(
                log, conn, checkpoints, stored, progress, public, workers, tree_work=work
            )
        )
    if public is None:
        raise AuditError("no public key to check the audit segments' seals with")
    pruned = tuple(s for s in catalog if s.pruned)
    sealed = tuple(s for s in catalog if not s.pruned)
    verdict = ChainVerdict(result=VerifyResult(ok=True, records_checked=0), sealed=sealed)
    expected, prev, done = 0, GENESIS_HASH, 0
    pending = sorted(checkpoints, key=lambda c: c.size)
    signature_ok = host_signed(log, public)

    unverifiable: list[tuple[int, str]] = []
    for seg in catalog:
        failure = _seam(seg, expected, prev, log.origin, public)
        if failure is not None:
            return _with(verdict, failure, pruned, expected)
        mine = [c for c in pending if c.size <= seg.last_seq + 1]
        pending = [c for c in pending if c.size > seg.last_seq + 1]
        if seg.pruned:
            for cp in mine:
                if not signature_ok(cp) or cp.origin != log.origin:
                    return _with(verdict, _bad_cp(cp), pruned, expected)
                if cp.size == seg.last_seq + 1 or cp.size == expected:
                    # at an edge of the pruned segment: held to its signed head (or first link)
                    edge = seg.head_hash if cp.size == seg.last_seq + 1 else prev
                    if chain_head(cp) != edge:
                        return _with(verdict, _truncated(cp, prev), pruned, expected)
                    done += 1
                else:  # the records it covers are gone: nothing to hold it to
                    unverifiable.append((cp.size, seg.name))
            expected, prev = seg.last_seq + 1, seg.head_hash
            continue
        mine.append(parse_checkpoint(seg.note))
        start = 0 if not pruned else pruned[-1].last_seq + 1
        result = _verify_sealed(
            log, seg, mine, expected, prev, signature_ok, progress, workers, work
        )
        if not result.ok:
            return _with(verdict, result, pruned, start)
        done += result.checkpoints_checked
        expected, prev = seg.last_seq + 1, seg.head_hash
    start = 0 if not pruned else pruned[-1].last_seq + 1
    result = verify_live(
        log, conn, pending, stored, progress, public, workers, (expected, prev), work
    )
    if result.ok:
        result = VerifyResult(
            ok=True,
            records_checked=result.records_checked,
            head_hash=result.head_hash,
            checkpoints_checked=result.checkpoints_checked + done,
        )
    return _with(verdict, result, pruned, start, tuple(unverifiable))


def _with(
    verdict: ChainVerdict,
    result: VerifyResult,
    pruned: tuple[Segment, ...],
    start: int,
    unverifiable: tuple[tuple[int, str], ...] = (),
) -> ChainVerdict:
    return ChainVerdict(
        result=result,
        first_seq=start,
        sealed=verdict.sealed,
        pruned=pruned,
        unverifiable=unverifiable if result.ok else (),
    )


def _bad_cp(cp: Checkpoint) -> VerifyResult:
    return broken(
        0,
        None,
        "checkpoint-signature-invalid",
        f"checkpoint of size {cp.size} is not signed by this host's key",
    )


def _truncated(cp: Checkpoint, prev: str) -> VerifyResult:
    seq = cp.size - 1
    return broken(
        seq,
        seq,
        "truncated-below-checkpoint",
        f"the anchor differs from the checkpoint of size {cp.size}",
        prev,
    )


def _seam(
    seg: Segment, expected: int, prev: str, origin: str, public: signing.PublicKey
) -> VerifyResult | None:
    """The checks at a segment's start: it follows the previous one, and a statement of its
    kind signed by the host key covers it."""
    if seg.first_seq != expected:
        return broken(
            expected,
            expected,
            "seq-gap",
            f"segment {seg.name} starts at seq {seg.first_seq}, expected {expected}",
            prev,
        )
    if seg.prev_hash != prev:
        return broken(
            expected,
            expected,
            "prev-hash-mismatch",
            f"segment {seg.name} does not link to the head of the segment before it",
            prev,
        )
    why = unattested(seg, origin, public)
    if why is not None:
        return broken(expected, expected, "segment-unattested", why, prev)
    return None


def _verify_sealed(
    log: LogHandle,
    seg: Segment,
    cps: list[Checkpoint],
    expected: int,
    prev: str,
    signature_ok: Callable[[Checkpoint], bool],
    progress: Callable[[int], None] | None,
    workers: int | None,
    work: parallel.TreeWork | None = None,
) -> VerifyResult:
    """One sealed segment's records, its stored checkpoints and ``cps`` (its seal among them),
    walked from ``(expected, prev)``; it must end exactly at its seal."""
    path = log._sealed.path(seg)
    if not path.is_file():
        return broken(
            expected,
            expected,
            "truncated-below-checkpoint",
            f"sealed segment {seg.name} (seqs {seg.first_seq}..{seg.last_seq}) is missing: {path}",
            prev,
        )
    conn = log._sealed.conn(seg)
    try:
        with conn:
            rows = conn.execute("SELECT id, note FROM audit_checkpoints ORDER BY size, id")
            known = {c.to_text() for c in cps}
            for cp_id, note in list(rows):
                if str(note) in known:  # the seal, also given from the catalogue
                    continue
                try:
                    cps.append(parse_checkpoint(str(note)))
                except CheckpointFormatError as e:
                    return broken(
                        expected,
                        None,
                        "checkpoint-signature-invalid",
                        f"checkpoint {cp_id} of segment {seg.name} is unreadable: {e}",
                        prev,
                    )
            result = parallel.walk(
                conn,
                path,
                cps,
                origin=log.origin,
                signature_ok=signature_ok,
                progress=progress,
                workers=workers,
                options=log._options,
                start_seq=expected,
                start_hash=prev,
                tree=work,
            )
    except apsw.Error as e:
        raise store_error(f"cannot read audit segment {seg.name}", e, path) from e
    if result.ok and result.records_checked != seg.last_seq + 1:
        extra = seg.last_seq + 1
        return broken(
            extra,
            extra,
            "seq-gap",
            f"sealed segment {seg.name} holds records past its seal (seq {extra})",
            seg.head_hash,
        )
    return result
