"""What the console's background watches know about the home between two looks: whether the
database changed at all (any commit by anyone, a file replaced), and the chain's verification
carried forward over an append. Reads only (``SQLITE_OPEN_READONLY``); must not write, recover
or migrate anything, and leaves the link rules to the core and the full walk to the store.

A :class:`ChangeWatch` holds one long-lived read-only connection and reports a change when
SQLite's ``PRAGMA data_version`` moved (a commit by any other connection, in any process), when
the database file was replaced or removed (its device and inode), or when a file of the sealed
segments changed (name, size, mtime, inode). :func:`extend` verifies only the records appended
after a verified head, and only when nothing else it can see changed: the record at the old head
still carries the verified hash, the checkpoints and the segment catalogue are the ones the last
walk checked; anything else is the caller's cue for a full walk. The tree's hashes those
records added are recomputed from their record hashes (and the stored right edge of the tree the
last walk verified) and compared with the table (:class:`..store.treecheck.RangeCheck`): a
replaced or missing node among them fails the increment, and the caller's full walk names it. A
node below the verified size replaced alongside an append is the next full walk's to name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from .. import signing
from ..core.audit.chain import (
    GENESIS_HASH,
    ROW_COLUMNS,
    Checkpoint,
    VerifyResult,
    note_key_hash,
    parse_checkpoint,
    verify_chain,
)
from ..core.audit.merkle import stored_hash_count
from ..core.audit.treehead import chain_head
from ..core.audit.verdict import broken
from ..errors import CheckpointFormatError
from ..store.audit.segments import read_catalog, segments_dir
from ..store.codec import FUNCTION
from ..store.db import close_quietly, store_error
from ..store.home import Home
from ..store.treecheck import RangeCheck, failure, stored_count

__all__ = ["ChainMark", "ChangeWatch", "extend", "mark"]

_ROWS: Final = (
    f"SELECT {', '.join(ROW_COLUMNS[:-1])}, {FUNCTION}(payload) FROM audit_records "
    "WHERE seq >= ? ORDER BY seq"
)
_HASH_AT: Final = "SELECT record_hash FROM audit_records WHERE seq = ?"
_NOTE: Final = "SELECT note FROM audit_checkpoints WHERE id = ?"
_HEAD: Final = "SELECT seq, record_hash FROM audit_records ORDER BY seq DESC LIMIT 1"


def _files(home: Home) -> tuple[Any, ...]:
    """The identity of the database file and of every file of the segments directory."""
    try:
        st = os.stat(home.db_path)
        db: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        db = None
    directory = segments_dir(home.db_path)
    seen = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        names = []
    for name in names:
        try:
            st = os.stat(directory / name)
        except OSError:
            continue
        seen.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    return db, tuple(seen)


class ChangeWatch:
    """Tells whether the home's database changed since the last :meth:`changed` (the first call
    says it did). One thread at a time; :meth:`close` releases the connection."""

    def __init__(self, home: Home) -> None:
        self._home = home
        self._conn: apsw.Connection | None = None
        self._files: tuple[Any, ...] | None = None
        self._version: int | None = None
        #: Whether the last change was a file replaced, removed or first seen (not a commit):
        #: nothing of what was verified can be carried over then.
        self.replaced = True

    def changed(self) -> bool:
        """Whether anything changed; an unreadable database counts as a change (every time).

        Raises:
            StoreError, HomeError: the database cannot be opened (it then counts as changed on
                the next call too).
        """
        files = _files(self._home)
        if files != self._files:
            self.close()
        if self._conn is None:
            self._files, self.replaced = None, True
            self._conn = self._home.connect(write=False)
            self._files, self._version = files, self._data_version()
            return True
        version = self._data_version()
        if version != self._version:
            self._version, self.replaced = version, False
            return True
        return False

    def _data_version(self) -> int:
        assert self._conn is not None
        try:
            return int(str(self._conn.pragma("data_version")))
        except apsw.Error as e:
            self.close()
            raise store_error("cannot read the audit log", e, self._home.db_path) from e

    @property
    def conn(self) -> apsw.Connection:
        """The watch's read-only connection (after :meth:`changed`)."""
        if self._conn is None:
            self._conn = self._home.connect(write=False)
        return self._conn

    def close(self) -> None:
        """Close the connection (the next :meth:`changed` opens a new one and says changed)."""
        if self._conn is not None:
            close_quietly(self._conn)
        self._conn = None
        self._files = None


@dataclass(frozen=True, slots=True)
class ChainMark:
    """What a walk covered, beyond its verdict: the stored checkpoints (by id) it held the chain
    to, and the segment catalogue it walked."""

    checkpoints: frozenset[int]
    catalog: tuple[Any, ...]


def mark(conn: apsw.Connection) -> ChainMark:
    """The stored checkpoints and the segment catalogue, as ``conn`` sees them now (read before
    a walk: whatever is added meanwhile is then new to the next look).

    Raises:
        apsw.Error: the tables cannot be read.
    """
    with conn:
        ids = frozenset(int(r[0]) for r in conn.execute("SELECT id FROM audit_checkpoints"))
        catalog = tuple(
            (s.name, s.first_seq, s.last_seq, s.head_hash, s.pruned) for s in read_catalog(conn)
        )
    return ChainMark(checkpoints=ids, catalog=catalog)


def _rows(conn: apsw.Connection, start: int, tree: RangeCheck | None) -> Iterator[tuple[Any, ...]]:
    """The rows from ``start``, each record hash handed to ``tree`` on the way."""
    if tree is None:
        yield from conn.execute(_ROWS, (start,))
        return
    for row in conn.execute(_ROWS, (start,)):
        tree.add(row[4])
        yield row


def _tree_of(conn: apsw.Connection, size: int) -> RangeCheck | None:
    """The check of the tree's hashes past ``size`` leaves, when the stored tree covers them
    (none: a home whose tree is unavailable or not built yet, which the full walk reports)."""
    count = stored_count(conn)
    if count == 0 or count < stored_hash_count(size):
        return None
    return RangeCheck(conn, size)


def _tree_verdict(
    conn: apsw.Connection, tree: RangeCheck | None, result: VerifyResult
) -> VerifyResult:
    """``result`` (the appended records held), unless the tree's hashes they added do not."""
    if tree is None:
        return result
    outcome = tree.outcome()
    state = outcome[0]
    if state == "ok":
        count, want = stored_count(conn), stored_hash_count(result.records_checked)
        if count <= want:
            return result
        top = result.records_checked
        detail = f"the tree stores {count} hashes, {count - want} past the chain's head"
        return broken(top, top, "tree-overrun", detail, result.head_hash or GENESIS_HASH)
    if state == "unchecked":
        return broken(0, None, "tree-node-mismatch", outcome[2])
    bad = failure(outcome)
    seq = bad.first_bad_seq
    return broken(seq or 0, seq, bad.state, bad.detail, result.head_hash or GENESIS_HASH)  # type: ignore[arg-type]


def extend(
    conn: apsw.Connection,
    *,
    verified: VerifyResult,
    seen: ChainMark,
    origin: str,
    public: signing.PublicKey,
) -> tuple[VerifyResult, ChainMark, int] | None:
    """Carry ``verified`` (a passed walk that covered ``seen``) over records appended since,
    walking only those: ``(verdict, mark, records walked)``, or ``None`` when the change was not
    an append (the head moved back or stayed, the record at the old head changed, a checkpoint
    or a segment was added, removed or changed): the caller then walks in full. A verdict that
    fails is the increment's; the caller walks in full to name the first broken seq.

    Raises:
        StoreError: the database cannot be read.
    """
    size, head = verified.records_checked, verified.head_hash or GENESIS_HASH
    try:
        with conn:
            now_mark = mark(conn)
            row = conn.execute(_HEAD).fetchone()
            if (
                row is None
                or int(row[0]) + 1 <= size
                or now_mark.catalog != seen.catalog
                or not seen.checkpoints <= now_mark.checkpoints
            ):
                return None
            if size and conn.execute(_HASH_AT, (size - 1,)).get != head:
                return None
            key_hash = note_key_hash(origin, public.raw)

            def signature_ok(cp: Checkpoint) -> bool:
                sig = cp.signature_by(origin, key_hash)
                return sig is not None and signing.check(public, cp.body, sig)

            cps: list[Checkpoint] = []
            at_head = 0
            for cp_id in sorted(now_mark.checkpoints - seen.checkpoints):
                note = conn.execute(_NOTE, (cp_id,)).get
                try:
                    cp = parse_checkpoint(str(note))
                except CheckpointFormatError:
                    return None  # a full walk names it
                if cp.size == size and cp.origin == origin and chain_head(cp) == head:
                    if not signature_ok(cp):
                        return None
                    at_head += 1  # of the verified head (auto-checkpointing): it holds
                elif cp.size <= size:
                    return None  # a checkpoint inside what was walked: a full walk checks it
                else:
                    cps.append(cp)
            tree = _tree_of(conn, size)
            try:
                result = verify_chain(
                    _rows(conn, size, tree),
                    checkpoints=cps,
                    origin=origin,
                    signature_ok=signature_ok if cps else None,
                    start_seq=size,
                    start_hash=head,
                )
                if result.ok:
                    result = _tree_verdict(conn, tree, result)
            finally:
                if tree is not None:
                    tree.close()
    except apsw.Error as e:
        raise store_error("cannot read the audit log", e, Path(conn.filename)) from e
    if result.ok:
        result = VerifyResult(
            ok=True,
            records_checked=result.records_checked,
            head_hash=result.head_hash,
            checkpoints_checked=verified.checkpoints_checked + at_head + len(cps),
        )
    return result, now_mark, max(0, result.records_checked - size)
