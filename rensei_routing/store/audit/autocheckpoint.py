"""Automatic checkpoints on the default write path: after an append has committed (never inside
its transaction), once at least ``[audit] checkpoint_every`` records lie past the latest stored
checkpoint, the appending process signs a checkpoint of the head with the home's key, as
``rensei audit checkpoint`` does (the same note, ``payloads: strict-json`` included, stored in
``audit_checkpoints``). Owns reading ``checkpoint_every`` from ``config.toml`` and the decision
when; the signing is :func:`.rotation.sign`'s and the walk the core's.

What it proves before it signs: the records past the **base** (the largest stored checkpoint
or segment seal signed by this log's key that carries ``payloads: strict-json``, else genesis)
are walked from the base's head exactly as ``verify()`` walks them, every payload parsed
strictly, in one read snapshot; the new checkpoint covers exactly the records walked. The
records below the base are the base's signer's word (its head is the link the walk starts
from), so each record is parsed once, when the checkpoint past it is made, not once per
checkpoint (``checkpoint()`` re-walks the whole log: O(n) hash checks per checkpoint, which at
every 10,000 records of a 5,000,000-record segment would cost more than the appends). This
weakens no verification: ``verify()`` still checks every record's hashes and links and every
checkpoint against the log, and a record altered below a checkpoint is still a hash mismatch
at its own seq.

The records **this process appended** through ``append``/``append_many``/``append_within``
since the base are not read again: their bytes are the canonical encoder's (strict by
construction) and this process computed their hashes, so the log keeps each such batch's
``(first seq, last seq, the head it followed, its head)``, and the walk takes a batch when it
reaches it at the head it followed and the stored record at its last seq carries its head. The
head signed then names exactly the chain this process verified or wrote. (A batch rewritten
after the append, hashes recomputed, no longer ends at its head: nothing is signed. One
altered without recomputing them is not looked at here, but ``verify()`` names it at its own
seq, as it would below any checkpoint.) Records other processes appended are walked and
parsed. ``append_encoded``/``append_stamped`` (bytes the caller vouches for) are walked too,
unless the caller says they are its own (``own=True``).

Concurrency: one process at a time, under the segments' lock (``wait=False``: a writer that finds
it held skips, the holder or the next writer past the threshold checkpoints), and the row is
inserted only if no checkpoint of that size is stored yet (through the process's commit queue, in
the write transaction its appends share: a write transaction of its own would wait behind theirs),
so two writers deciding at once store one checkpoint per head (and an Ed25519 signature of the same
body is the same bytes). A failure here is not the append's (it committed): the process stops
trying, keeps the message in ``AuditLog.auto_checkpoint_error``, and the next writer past the
threshold tries.
"""

from __future__ import annotations

from typing import Final

import apsw

from ... import signing
from ...core.audit.chain import (
    GENESIS_HASH,
    ROW_COLUMNS,
    STRICT_PAYLOADS,
    Checkpoint,
    VerifyResult,
    note_key_hash,
    parse_checkpoint,
    walk_range,
)
from ...core.audit.treehead import chain_head
from ...core.audit.verdict import Reason
from ...errors import AuditError, CheckpointFormatError, RenseiRoutingError
from ..codec import FUNCTION
from ..home import Home
from . import group, tree
from .attest import sign
from .handle import LogHandle
from .rotation import _key, audit_record_count
from .segments import SegmentLock, read_catalog

__all__ = ["DEFAULT_CHECKPOINT_EVERY", "checkpoint_every", "checkpoint_if_due", "latest_size"]

#: ``[audit] checkpoint_every`` when the home does not set it (docs/store.md says why).
DEFAULT_CHECKPOINT_EVERY: Final = 10_000
_SELECT: Final = (
    f"SELECT {', '.join(ROW_COLUMNS[:-1])}, {FUNCTION}(payload) AS payload FROM audit_records "
    "WHERE seq >= ? ORDER BY seq"
)
_RANGE: Final = _SELECT.replace("ORDER BY", "AND seq < ? ORDER BY")
_HASH_AT: Final = "SELECT record_hash FROM audit_records WHERE seq = ?"
_LATEST: Final = (
    "SELECT max(s) FROM (SELECT max(size) AS s FROM audit_checkpoints "
    "UNION ALL SELECT max(last_seq) + 1 FROM audit_segments)"
)


def checkpoint_every(home: Home) -> int | None:
    """``[audit] checkpoint_every`` in the home's ``config.toml`` (default
    :data:`DEFAULT_CHECKPOINT_EVERY`; 0: never checkpoint automatically, ``None`` returned).

    Raises:
        HomeError: the file is unreadable, not TOML, or the value is not a whole number >= 0.
    """
    return audit_record_count(
        home, "checkpoint_every", DEFAULT_CHECKPOINT_EVERY, off="0: never checkpoint automatically"
    )


def latest_size(conn: apsw.Connection) -> int:
    """The size of the largest stored checkpoint or segment seal (0 when none): a cheap bound
    for the decision, read without parsing a note."""
    value = conn.execute(_LATEST).get
    return 0 if value is None else int(value)


def checkpoint_if_due(log: LogHandle, next_seq: int, every: int) -> Checkpoint | None:
    """After an append committed with ``next_seq`` the next seq: checkpoint the head when at
    least ``every`` records lie past the latest checkpoint (see the module docstring); the
    checkpoint stored, or ``None``. Never raises for a failure of its own (noted on ``log``)."""
    if next_seq - log._checkpointed < every:
        return None  # a lower bound of the latest size: no read needed
    try:
        conn = log._read_conn()
        with conn:
            log._checkpointed = max(log._checkpointed, latest_size(conn))
        # Batches wholly below the latest checkpoint can spare nothing any more.
        log._vouched = [v for v in log._vouched if v[1] >= log._checkpointed]
        if next_seq - log._checkpointed < every:
            return None
        lock = SegmentLock(log._path)
        if not lock.acquire(wait=False):
            return None  # a rotation (it seals) or another writer's checkpoint is running
        try:
            return _checkpoint(log, every)
        finally:
            lock.release()
    except (RenseiRoutingError, apsw.Error, OSError) as e:
        log._checkpoint_every = None
        log.auto_checkpoint_error = f"automatic checkpoint failed: {type(e).__name__}: {e}"
        return None


def _base(log: LogHandle, conn: apsw.Connection, public: signing.PublicKey) -> tuple[int, str]:
    """``(size, head hash)`` of the largest stored checkpoint or seal signed by ``public`` for
    this log and carrying ``payloads: strict-json``; genesis when there is none."""
    notes = [str(r[0]) for r in conn.execute("SELECT note FROM audit_checkpoints")]
    notes += [s.note for s in read_catalog(conn)]
    parsed = []
    for note in notes:
        try:
            parsed.append(parse_checkpoint(note))
        except CheckpointFormatError:
            continue  # never a base; verify() reports it
    key_hash = note_key_hash(log.origin, public.raw)
    for cp in sorted(parsed, key=lambda c: c.size, reverse=True):
        sig = cp.signature_by(log.origin, key_hash)
        if (
            cp.origin == log.origin
            and STRICT_PAYLOADS in cp.extensions
            and sig is not None
            and signing.check(public, cp.body, sig)
        ):
            return cp.size, chain_head(cp)
    return 0, GENESIS_HASH


def _checkpoint(log: LogHandle, every: int) -> Checkpoint | None:
    """Under the lock: walk past the base, sign and store (once per size)."""
    key = _key(log)
    conn = log._read_conn()
    with conn:  # one read snapshot: the base, the head and the rows walked
        size, head = _base(log, conn, key.public_key)
        top = conn.execute("SELECT max(seq) FROM audit_records").get
        if top is None or int(top) + 1 - size < every:
            log._checkpointed = max(log._checkpointed, size)
            return None
        result = _walk(conn, size, head, log._vouched)
        root = tree.root_at(conn, result.records_checked) if result.ok else None
    if not result.ok or result.records_checked != int(top) + 1:
        raise AuditError(
            f"the records past seq {size} do not verify: seq {result.first_broken_seq}: "
            f"{result.reason} ({result.detail})"
        )
    cp = sign(key, log.origin, result.records_checked, result.head_hash, STRICT_PAYLOADS, root)

    def store(conn: apsw.Connection) -> tuple[()]:
        conn.execute(
            "INSERT INTO audit_checkpoints(size, head_hash, note) SELECT ?, ?, ? "
            "WHERE NOT EXISTS (SELECT 1 FROM audit_checkpoints WHERE size = ?)",
            (cp.size, result.head_hash, cp.to_text(), cp.size),
        )
        return ()  # a change alone: no record

    # Stored through the commit queue, in a transaction the appends of this process share: a
    # write transaction of its own would wait for theirs, which follow one another back to back.
    job = group.Job(within=store)
    group.queue_of(log).run(log, job)
    if job.error is not None:
        raise job.error
    log._checkpointed = max(log._checkpointed, cp.size)
    log._vouched = [v for v in log._vouched if v[1] >= cp.size]
    return cp


def _walk(
    conn: apsw.Connection, start: int, head: str, vouched: list[tuple[int, int, str, str]]
) -> VerifyResult:
    """The records from ``start`` (linked to ``head``) in the caller's read snapshot, as
    ``verify()`` walks them, every payload parsed, except this process's own batches
    ``vouched`` (first, last, the head they followed, their head), which are taken when the
    walk reaches them at the head they followed and the stored record at ``last`` carries
    their head (see the module docstring)."""
    expected, prev = start, head
    for first, last, before, after in sorted(v for v in vouched if v[0] >= start):
        if first > expected:
            result = _stretch(conn, expected, first, prev)
            if not result.ok:
                return result
            expected, prev = result.records_checked, result.head_hash
        if first != expected or prev != before:
            why = f"record {first - 1} is not the head batch {first} followed"
            return _refused(expected, "prev-hash-mismatch", why)
        stored = conn.execute(_HASH_AT, (last,)).get
        if stored != after:
            why = f"record {last} is not the head this process wrote"
            return _refused(last, "truncated-below-checkpoint", why)
        expected, prev = last + 1, after
    return _stretch(conn, expected, None, prev)


def _stretch(conn: apsw.Connection, lo: int, hi: int | None, prev: str) -> VerifyResult:
    """The rows ``lo <= seq < hi`` (all from ``lo`` when ``hi`` is ``None``), walked strictly
    from ``prev``; a stretch that ends short of ``hi`` is a failure."""
    sql, args = (_SELECT, (lo,)) if hi is None else (_RANGE, (lo, hi))
    cursor = conn.execute(sql, args)
    try:
        result = walk_range(cursor, {}, expected=lo, prev=prev, parsed_below=0)
    finally:
        cursor.close(True)
    if result.ok and hi is not None and result.records_checked != hi:
        seq = result.records_checked
        return _refused(seq, "seq-gap", f"the log has no record {seq}")
    return result


def _refused(seq: int, reason: Reason, detail: str) -> VerifyResult:
    return VerifyResult(
        ok=False, records_checked=seq, first_broken_seq=seq, reason=reason, detail=detail
    )
