"""Sealing and pruning the audit chain's segments (the layout is :mod:`.segments`'s): ``rensei
audit rotate``, the automatic rotation by size, and ``rensei audit prune``. Owns the writes to
``audit_segments`` and to ``<home>/audit/segments/``; reads ``[audit] rotate_at_records`` from
the home's ``config.toml``.

A rotation, under the segments' lock (one at a time; appends never wait for it):

1. reads the live segment's bounds ``first..last`` (one read snapshot; appends go on);
2. builds ``.<first>-<last>.db.tmp``: a new rensei-routing database in rollback-journal mode,
   into which the stored rows ``first..last``, the checkpoints of that stretch, the home's
   compression dictionaries and its identity are copied (SQLite reads the home through
   ``ATTACH``, in one read snapshot, taking no write lock on the home);
3. verifies that file's chain from the previous head, and stores in it the seal: a checkpoint
   of size ``last + 1`` and its head, signed with the home's key;
4. fsyncs it, makes it read-only (0444) and renames it to ``<first>-<last>.db`` (fsyncing the
   directory);
5. in one write transaction on the home: checks the live rows still start at ``first`` and
   end at ``last`` with that head, catalogues the segment, and deletes the moved rows and
   checkpoints from the live table. Records appended meanwhile stay live and already link to
   that head, so seq and links continue.

A crash before step 5 commits leaves the old layout (the live table holds every record; a
temporary file or an uncatalogued segment file is ignored by readers and removed by
:func:`.segments.recover`); once it commits, the new one. Never a gap, never two heads.

Test hook: ``RENSEI_TEST_CRASH_AT=<step>`` (read here only) SIGKILLs the process at that step
(:data:`STEPS`), so the crash tests can stop a real rotation or prune at each point.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import apsw

from ... import signing
from ...core.audit.anchors import SegmentClaim
from ...core.audit.archive import MAX_LINE_BYTES, rows_from_lines
from ...core.audit.chain import (
    GENESIS_HASH,
    Checkpoint,
    verify_chain,
)
from ...core.audit.treehead import chain_head
from ...errors import AuditError, HomeError, RenseiRoutingError, SegmentError
from ...files import fsync_dir
from .. import parallel
from ..db import connect, store_error
from ..home import Home
from . import tree
from .attest import claim_of, sign_claim, unattested
from .chainwalk import host_signed, stored_checkpoints
from .handle import LogHandle
from .recovery import catalog_of, recover_locked
from .segments import (
    Segment,
    SegmentLock,
    head_across,
    segments_dir,
)

__all__ = [
    "CRASH_ENV",
    "DEFAULT_ROTATE_AT",
    "STEPS",
    "Rotation",
    "prune",
    "rotate",
    "rotate_at_records",
    "rotate_if_due",
]

#: ``[audit] rotate_at_records`` when the home does not set it.
DEFAULT_ROTATE_AT: Final = 5_000_000
#: The test hook's environment variable (see the module docstring).
CRASH_ENV: Final = "RENSEI_TEST_CRASH_AT"
#: Where the hook can stop a rotation (the first five) or a prune (the last two).
STEPS: Final = ("locked", "copied", "sealed", "renamed", "committed", "prune-marked", "prune-one")


def _step(name: str) -> None:
    """The crash hook: SIGKILL this process when ``RENSEI_TEST_CRASH_AT`` names this step."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def rotate_at_records(home: Home) -> int | None:
    """``[audit] rotate_at_records`` in the home's ``config.toml`` (default
    :data:`DEFAULT_ROTATE_AT`; 0: never rotate automatically, ``None`` returned).

    Raises:
        HomeError: the file is unreadable, not TOML, or the value is not a whole number >= 0.
    """
    return audit_record_count(
        home, "rotate_at_records", DEFAULT_ROTATE_AT, off="0: never rotate automatically"
    )


def audit_record_count(home: Home, name: str, default: int, *, off: str) -> int | None:
    """A record count ``[audit] <name>`` in the home's ``config.toml``: ``default`` when the
    file or the key is absent, ``None`` for 0 (``off`` says what 0 means, in the error).

    Raises:
        HomeError: the file is unreadable, not TOML, or the value is not a whole number >= 0.
    """
    try:
        with open(home.config_path, "rb") as f:
            config = tomllib.load(f)
    except FileNotFoundError:
        return default
    except OSError as e:
        raise HomeError(f"cannot read {home.config_path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise HomeError(f"{home.config_path} is not valid TOML: {e}") from e
    audit = config.get("audit", {})
    value = audit.get(name) if isinstance(audit, dict) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**62:
        raise HomeError(
            f"{home.config_path}: [audit] {name} must be a whole number of records "
            f"({off}), not {value!r}"
        )
    return value or None


@dataclass(frozen=True, slots=True, kw_only=True)
class Rotation:
    """A sealed segment: its catalogue row, its file and its seal."""

    segment: Segment
    path: Path

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {**self.segment.to_dict(), "path": str(self.path)}


def _locked(log: LogHandle, *, wait: bool) -> SegmentLock | None:
    lock = SegmentLock(log._path)
    try:
        if not lock.acquire(wait=wait):
            return None
    except OSError as e:
        raise SegmentError(f"cannot lock {segments_dir(log._path)}: {e.strerror or e}") from e
    return lock


def _key(log: LogHandle) -> signing.PrivateKey:
    key = log._private_key()
    if log._public is not None and log._public.raw != key.public_key.raw:
        raise AuditError("refusing to seal: the signing key does not match this log's public key")
    return key


@contextlib.contextmanager
def catalog_locked(
    log: LogHandle, checking: str
) -> Iterator[tuple[signing.PublicKey, signing.PrivateKey, tuple[Segment, ...]]]:
    """What a change to the catalogue's signed statements (a prune, a re-attestation) starts
    from: the log's public key, its signing key, and the catalogue read once the segments' lock
    is held (waited for) and the directory reconciled; the lock is held until the block ends.

    Raises:
        AuditError: the log has no public key (to check ``checking`` with).
        AuditError, HomeError: no usable signing key.
        SegmentError: the lock cannot be taken.
        StoreError: the catalogue cannot be read.
    """
    public = log._public
    if public is None:
        raise AuditError(f"no public key to check {checking} with")
    key = _key(log)
    lock = _locked(log, wait=True)
    assert lock is not None
    try:
        recover_locked(log)
        yield public, key, catalog_of(log)
    finally:
        lock.release()


def rotate(
    log: LogHandle,
    *,
    wait: bool = True,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
) -> Rotation | None:
    """Seal the live segment (see the module docstring). ``wait=False``: return ``None`` at
    once when another rotation or prune holds the lock.

    Raises:
        SegmentError: the live segment is empty, or does not verify, or changed under the
            rotation (nothing was moved).
        AuditError, HomeError: no usable signing key.
        StoreError: a database read or write failed (the old layout stands).
    """
    key = _key(log)
    lock = _locked(log, wait=wait)
    if lock is None:
        return None
    try:
        recover_locked(log)
        _step("locked")
        return _rotate(log, key, progress, workers)
    finally:
        lock.release()


def _rotate(
    log: LogHandle,
    key: signing.PrivateKey,
    progress: Callable[[int], None] | None,
    workers: int | None,
) -> Rotation:
    conn = log._read_conn()
    try:
        with conn:
            latest = head_across(conn)
            bounds = conn.execute("SELECT min(seq), max(seq) FROM audit_records").fetchone()
    except apsw.Error as e:
        raise store_error("cannot read the audit log", e, log._path) from e
    lo, hi = (None, None) if bounds is None else bounds
    if hi is None:
        raise SegmentError("nothing to rotate: the live audit segment holds no records")
    expected, prev = (0, GENESIS_HASH) if latest is None else (latest[0] + 1, latest[1])
    if lo != expected:
        raise SegmentError(
            f"refusing to rotate: the live segment starts at seq {lo}, not at seq {expected} "
            "after the last sealed segment; run `rensei audit verify`"
        )
    directory = segments_dir(log._path)
    final = directory / f"{lo}-{hi}.db"
    if final.exists():
        raise SegmentError(f"refusing to rotate: {final} already exists")
    tmp = directory / f".{lo}-{hi}.db.tmp"
    try:
        _remove(tmp)
        ids = _build(log, tmp, lo, hi, prev)
        _step("copied")
        cp = _seal(log, tmp, key, (lo, hi, prev), progress, workers)
        _step("sealed")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o444)
        os.rename(tmp, final)
        fsync_dir(directory)
        _step("renamed")
    except OSError as e:
        _remove(tmp)
        raise SegmentError(f"cannot write the audit segment {final}: {e.strerror or e}") from e
    except BaseException:
        _remove(tmp)
        raise
    segment = Segment(
        first_seq=lo, last_seq=hi, prev_hash=prev, head_hash=chain_head(cp), note=cp.to_text()
    )
    try:
        _commit(log, segment, ids)
    except BaseException:
        recover_locked(log)  # removes the file only if its records are all still live
        raise
    _step("committed")
    return Rotation(segment=segment, path=final)


def _remove(tmp: Path) -> None:
    for leftover in (tmp, *(Path(f"{tmp}{s}") for s in ("-journal", "-wal", "-shm"))):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


def _build(log: LogHandle, tmp: Path, lo: int, hi: int, prev: str) -> list[int]:
    """Step 2: the segment file with its rows, checkpoints, dictionaries and identity; the ids
    of the home checkpoints it took."""
    o = log._options
    tmp.parent.mkdir(parents=True, exist_ok=True)
    seg = connect(tmp, write=True, busy_timeout_ms=o.busy_timeout_ms, vfs=o.vfs)
    stretch = (lo, hi + 1)
    try:
        seg.pragma("journal_mode", "delete")  # one self-contained file, read without -wal/-shm
        seg.transaction_mode = "DEFERRED"  # never a write lock on the attached home
        seg.execute("ATTACH DATABASE ? AS home", (str(log._path),))
        try:
            with seg:
                seg.execute(
                    "INSERT INTO main.audit_records SELECT seq, recorded_at, prev_hash, "
                    "payload_hash, record_hash, payload FROM home.audit_records "
                    "WHERE seq >= ? AND seq <= ? ORDER BY seq",
                    (lo, hi),
                )
                seg.execute(
                    "INSERT OR IGNORE INTO main.audit_dictionaries(id, body) "
                    "SELECT id, body FROM home.audit_dictionaries"
                )
                where = "FROM home.audit_checkpoints WHERE size > ? AND size <= ?"
                ids = [int(r[0]) for r in seg.execute(f"SELECT id {where}", stretch)]
                seg.execute(
                    "INSERT INTO main.audit_checkpoints(size, head_hash, note) "
                    f"SELECT size, head_hash, note {where} ORDER BY size, id",
                    stretch,
                )
                seg.execute(
                    "INSERT INTO main.meta(key, value) SELECT key, value FROM home.meta "
                    "WHERE key IN ('org_id', 'host_key_id')"
                )
                seg.executemany(
                    "INSERT INTO main.meta(key, value) VALUES (?, ?)",
                    [
                        ("segment.first_seq", str(lo)),
                        ("segment.last_seq", str(hi)),
                        ("segment.prev_hash", prev),
                    ],
                )
        finally:
            seg.execute("DETACH DATABASE home")
    except apsw.Error as e:
        raise store_error("cannot copy the audit segment", e, log._path) from e
    finally:
        seg.close()
    return ids


def _seal(
    log: LogHandle,
    tmp: Path,
    key: signing.PrivateKey,
    bounds: tuple[int, int, str],
    progress: Callable[[int], None] | None,
    workers: int | None,
) -> Checkpoint:
    """Step 3: verify the file's chain from the previous head; store the signed seal in it."""
    lo, hi, prev = bounds
    o = log._options
    signature_ok = host_signed(log, key.public_key)
    seg = connect(tmp, write=True, busy_timeout_ms=o.busy_timeout_ms, vfs=o.vfs)
    try:
        seg.pragma("journal_mode", "delete")  # a writer's connect switched it to WAL again
        seg.transaction_mode = "DEFERRED"
        with seg:
            cps = stored_checkpoints(seg)
            result = parallel.walk(
                seg, tmp, cps, origin=log.origin, signature_ok=signature_ok,
                progress=progress, workers=workers, options=o, start_seq=lo, start_hash=prev,
            )  # fmt: skip
        if not result.ok or result.records_checked != hi + 1:
            where = "-" if result.first_broken_seq is None else result.first_broken_seq
            raise SegmentError(
                f"refusing to seal a broken log: seq {where}: {result.reason} ({result.detail})"
            )
        claim = SegmentClaim(
            kind="sealed", first_seq=lo, last_seq=hi, prev_hash=prev, head_hash=result.head_hash
        )
        home = log._read_conn()
        with home:
            root = tree.root_at(home, hi + 1)
        cp = sign_claim(key, log.origin, claim, root)
        with seg:
            seg.execute(
                "INSERT INTO audit_checkpoints(size, head_hash, note) VALUES (?, ?, ?)",
                (cp.size, result.head_hash, cp.to_text()),
            )
    except apsw.Error as e:
        raise store_error("cannot seal the audit segment", e, log._path) from e
    finally:
        seg.close()
    return cp


def _commit(log: LogHandle, segment: Segment, ids: Sequence[int]) -> None:
    """Step 5: catalogue the segment and move its rows out of the live table, in one
    transaction, if the live table still holds exactly them at its start."""
    lo, hi = segment.first_seq, segment.last_seq
    conn = log._write_conn()
    try:
        with conn:
            latest = head_across(conn)
            low = conn.execute("SELECT min(seq) FROM audit_records").get
            at = conn.execute("SELECT record_hash FROM audit_records WHERE seq = ?", (hi,))
            head = at.fetchone()
            if (
                low != lo
                or head is None
                or head[0] != segment.head_hash
                or (0 if latest is None else latest[0] + 1) != lo
            ):
                raise SegmentError(
                    "refusing to rotate: the live audit segment changed during the rotation; "
                    "nothing was moved"
                )
            conn.execute(
                "INSERT INTO audit_segments(first_seq, last_seq, prev_hash, head_hash, note) "
                "VALUES (?, ?, ?, ?, ?)",
                (lo, hi, segment.prev_hash, segment.head_hash, segment.note),
            )
            conn.execute("DELETE FROM audit_records WHERE seq <= ?", (hi,))
            conn.executemany("DELETE FROM audit_checkpoints WHERE id = ?", [(i,) for i in ids])
    except apsw.Error as e:
        raise log._write_failed("cannot commit the audit rotation", e) from e


def rotate_if_due(log: LogHandle, next_seq: int, threshold: int) -> None:
    """The automatic rotation, after an append committed with ``next_seq`` the next seq: seal
    the live segment once it holds ``threshold`` records, unless another rotation runs. A
    failure is not the append's (it committed): the log stops trying in this process, and
    the next process to reach the size tries again."""
    if next_seq < threshold:
        return
    try:
        conn = log._read_conn()
        with conn:
            low = conn.execute("SELECT min(seq) FROM audit_records").get
        if low is not None and next_seq - int(low) >= threshold:
            rotate(log, wait=False)
    except (RenseiRoutingError, apsw.Error):
        log._rotate_at = None


# -- pruning -------------------------------------------------------------------------------------


def prune(log: LogHandle, *, before: int, exported: Sequence[Path]) -> tuple[Segment, ...]:
    """Remove the sealed segments that lie entirely below seq ``before``, each only when the
    export files ``exported`` (``rensei audit export``, one chain in the order given) hold
    every one of its records (a chain that verifies, reaching the segment's signed head) and
    its seal verifies; its catalogue row stays, marked pruned with the SHA-256 of the export
    files and a prune statement signed with the host key (range, first link, head and that
    SHA-256: :mod:`..core.audit.anchors`) in place of its seal, as the anchor verification
    starts from. Returns the segments pruned.

    Raises:
        SegmentError: nothing lies below ``before``, an export is missing, unreadable, does
            not verify or does not hold a segment, or a seal does not verify: nothing deleted.
        AuditError, HomeError: the log has no public key or no usable signing key.
        StoreError: the database read or write failed (nothing deleted).
    """
    with catalog_locked(log, "the audit segments' seals") as (public, key, catalog):
        targets = [s for s in catalog if not s.pruned and s.last_seq < before]
        if not targets:
            raise SegmentError(
                f"nothing to prune: no sealed segment lies entirely below seq {before}"
            )
        for seg in targets:
            why = unattested(seg, log.origin, public)
            if why is not None:
                raise SegmentError(f"refusing to prune: {why}")
        digest = _check_export(exported, targets)
        done = [replace(s, pruned=True, export_sha256=digest) for s in targets]
        done = [replace(s, note=_statement(log, key, s)) for s in done]
        writer = log._write_conn()
        try:
            with writer:
                writer.executemany(
                    "UPDATE audit_segments SET pruned = 1, export_sha256 = ?, note = ? "
                    "WHERE first_seq = ? AND pruned = 0",
                    [(digest, s.note, s.first_seq) for s in done],
                )
        except apsw.Error as e:
            raise log._write_failed("cannot record the prune", e) from e
        _step("prune-marked")
        for seg in targets:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segments_dir(log._path) / f"{seg.name}.db")
            _step("prune-one")
        with contextlib.suppress(OSError):
            fsync_dir(segments_dir(log._path))
    return tuple(done)


def _statement(log: LogHandle, key: signing.PrivateKey, segment: Segment) -> str:
    """The signed statement of ``segment``'s row: of the tree-root form when the tree covers
    it. (Its own transaction: the tree below a row's head never changes.)"""
    conn = log._read_conn()
    try:
        with conn:
            root = tree.root_at(conn, segment.last_seq + 1)
    except apsw.Error as e:
        raise store_error("cannot read the audit tree", e, log._path) from e
    return sign_claim(key, log.origin, claim_of(segment), root).to_text()


def _lines(paths: Sequence[Path], sha: Any) -> Iterator[str]:
    """The export files' lines, in order, each read to at most :data:`MAX_LINE_BYTES` (a longer
    one reads as unparseable), every byte fed to ``sha``."""
    for path in paths:
        with open(path, "rb") as f:
            while raw := f.readline(MAX_LINE_BYTES + 1):
                sha.update(raw)
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError:
                    yield "\x00"


def _check_export(paths: Sequence[Path], targets: Sequence[Segment]) -> str:
    """The SHA-256 of the export files, once they are shown to hold every record of
    ``targets``: they verify as one chain, cover the targets' seqs, the record at each
    target's first seq links to its ``prev_hash``, and the record at its last seq carries its
    (signed) head hash.

    Raises:
        SegmentError: not so (the message says which segment and why).
    """
    if not paths:
        raise SegmentError(
            "refusing to prune: name the export that holds the segments' records "
            "(`rensei audit export FILE --since SEQ`, then --exported FILE)"
        )
    heads = {s.last_seq: s for s in targets}
    starts = {s.first_seq: s for s in targets}
    seen: dict[int, str] = {}
    links: dict[int, str] = {}
    first: list[Any] = []
    sha = hashlib.sha256()

    def watch(rows: Iterator[Any]) -> Iterator[Any]:
        for row in rows:
            if not first:
                first.append(row)
            if len(row) > 4 and row[0] in heads:
                seen[row[0]] = row[4]
            if len(row) > 4 and row[0] in starts:
                links[row[0]] = row[2]
            yield row

    try:
        rows = watch(rows_from_lines(_lines(paths, sha)))
        peek = next(rows, None)
        if peek is None:
            raise SegmentError("refusing to prune: the export holds no records")
        start = peek[0] if type(peek[0]) is int and len(peek) > 4 else 0
        start_hash = peek[2] if start and isinstance(peek[2], str) else GENESIS_HASH
        result = verify_chain(_again(peek, rows), start_seq=max(0, start), start_hash=start_hash)
    except OSError as e:
        raise SegmentError(f"refusing to prune: cannot read the export: {e.strerror or e}") from e
    if not result.ok:
        raise SegmentError(
            f"refusing to prune: the export does not verify (seq {result.first_broken_seq}: "
            f"{result.reason})"
        )
    for seg in targets:
        if start > seg.first_seq or result.records_checked <= seg.last_seq:
            raise SegmentError(
                f"refusing to prune: the export (seqs {start}..{result.records_checked - 1}) "
                f"does not hold segment {seg.name}"
            )
        if seen.get(seg.last_seq) != seg.head_hash:
            raise SegmentError(
                f"refusing to prune: the export's record {seg.last_seq} is not segment "
                f"{seg.name}'s signed head"
            )
        if links.get(seg.first_seq) != seg.prev_hash:
            raise SegmentError(
                f"refusing to prune: the export's record {seg.first_seq} does not link to "
                f"segment {seg.name}'s first link"
            )
    return "sha256:" + sha.hexdigest()


def _again(peek: Any, rows: Iterator[Any]) -> Iterator[Any]:
    yield peek
    yield from rows
