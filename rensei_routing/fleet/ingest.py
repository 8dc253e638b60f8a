"""``rensei fleet ingest``: hosts' audit exports brought into the fleet database, verified
before a line is loaded. Owns the ingest rules; the chain rules are the core's
(:func:`~rensei_routing.core.audit.chain.verify_chain`), the files :mod:`.exports`'s, the keys
:mod:`.trust`'s.

One export file, in one transaction:

1. Its checkpoint (``NAME.checkpoint`` beside ``NAME.jsonl``) is read; the trusted host whose
   key signed it is the file's host (no trusted key signed it: refused).
2. The host's row is locked (one ingest of a host at a time) and the export is verified as
   ``rensei audit verify --file NAME.jsonl --checkpoint NAME.checkpoint --trust KEY`` does:
   every link and hash, and the record at the checkpoint's size carries its head hash. The
   records the store does not hold yet (from the host's ``size`` up to the checkpoint's size)
   are spooled while verifying; records past the checkpoint are not vouched by the key and are
   never loaded.
3. It continues what was ingested before, or it is a fork: the export's record at the last
   held seq (or its first ``prev_hash``, or, for an older export, its checkpoint's head) must
   equal the held chain's. A fork rolls back, then an alarm row names the host and the first
   seq at which the two chains differ (:class:`~rensei_routing.errors.FleetForkError`); the
   host is refused from then on. An export starting after the held head is a gap (refused).
4. Its checkpoint is checked against the one the fleet holds for the host by a consistency
   proof, ``NAME.consistency`` beside the export when the new checkpoint is larger
   (:mod:`.consistency`): two checkpoints that are not one history are a fork, handled as in 3.
5. Only then are the spooled rows loaded (``COPY``), the host's head, size, last ingest and
   revisions updated, and the loaded shadow records added to the report's per-group counts
   (:func:`.report.accumulate`); the transaction commits, or nothing of the file is in the
   database.

Ingesting the same export again adds nothing (and records the ingest); a longer one adds only
its new records.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from .. import signing
from ..core.audit.archive import export_start
from ..core.audit.chain import (
    ROW_COLUMNS,
    Checkpoint,
    VerifyResult,
    note_key_hash,
    verify_chain,
)
from ..core.audit.tlog import ADD_CHECKPOINT_MAX_BYTES
from ..core.audit.treehead import chain_head
from ..errors import (
    AuditError,
    FleetError,
    FleetForkError,
    FleetIngestRefusedError,
    InputError,
)
from ..store.notes import read_checkpoint
from .consistency import check_against_held, held_after
from .db import store_error
from .exports import checkpoint_for, consistency_for, export_files, export_rows
from .report import accumulate
from .trust import trusted_keys

if TYPE_CHECKING:
    import psycopg

__all__ = ["IngestResult", "ingest_file", "ingest_paths"]

#: COPY data kept in memory up to this size, spilled to a temporary file beyond.
_SPOOL_BYTES: Final = 64 * 1024 * 1024
_COPY_CHUNK: Final = 1024 * 1024
_COPY: Final = (
    "COPY fleet_records (host_id, seq, recorded_at, prev_hash, payload_hash, record_hash, "
    "payload) FROM STDIN"
)
_REVISIONS: Final = """
UPDATE fleet_hosts h SET ruleset_rev = COALESCE(n.ruleset_rev, h.ruleset_rev),
    snapshot_revision = COALESCE(
        substring(n.ruleset_rev from '@([0-9]{1,18})$')::bigint, h.snapshot_revision),
    policy_revision = COALESCE(p.policy_revision, h.policy_revision)
FROM (SELECT (SELECT ruleset_rev FROM fleet_records WHERE host_id = %(h)s AND seq >= %(s)s
              AND ruleset_rev IS NOT NULL ORDER BY seq DESC LIMIT 1) AS ruleset_rev) n,
     (SELECT (SELECT policy_revision FROM fleet_records WHERE host_id = %(h)s AND seq >= %(s)s
              AND policy_revision IS NOT NULL ORDER BY seq DESC LIMIT 1) AS policy_revision) p
WHERE h.host_id = %(h)s
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestResult:
    """One export ingested: ``added`` records (seqs ``first_added ..``), the host now holding
    ``held`` records; ``beyond`` records of the file were past its checkpoint (not loaded)."""

    file: str
    host_id: str
    first_seq: int
    checkpoint_size: int
    added: int
    first_added: int
    held: int
    head_hash: str
    beyond: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "host_id": self.host_id,
            "first_seq": self.first_seq,
            "checkpoint_size": self.checkpoint_size,
            "added": self.added,
            "first_added": self.first_added,
            "held": self.held,
            "head_hash": self.head_hash,
            "beyond_checkpoint": self.beyond,
        }


def _copy_field(text: str) -> bytes:
    data = text.encode("utf-8")
    if b"\\" in data or b"\t" in data or b"\n" in data or b"\r" in data:
        data = _escape(data)
    return data


def _escape(data: bytes) -> bytes:
    """``data`` as a field of PostgreSQL's COPY text format."""
    return (
        data.replace(b"\\", b"\\\\")
        .replace(b"\t", b"\\t")
        .replace(b"\n", b"\\n")
        .replace(b"\r", b"\\r")
    )


class _Spool:
    """Watches the rows the verifier walks: spools, as COPY text, those the store lacks
    (``held <= seq < size``), and keeps the hashes and time the continuity checks need."""

    def __init__(self, host_id: str, held: int, size: int, out: IO[bytes]) -> None:
        self.host = _copy_field(host_id)
        self.held, self.size, self.out = held, size, out
        self.hash_before_held: str | None = None  # the export's record_hash at held - 1
        self.head_recorded_at: str | None = None  # recorded_at of the record at size - 1
        self.count = 0
        self.rows_seen = 0

    def watch(self, rows: Iterable[Sequence[Any]]) -> Iterator[Sequence[Any]]:
        held, size, write, host = self.held, self.size, self.out.write, self.host
        for row in rows:
            self.rows_seen += 1
            seq = row[0] if len(row) == len(ROW_COLUMNS) else None
            if type(seq) is int:
                if held <= seq < size:
                    _, recorded_at, prev_hash, p_hash, r_hash, data = row
                    if b"\\" in data or b"\t" in data or b"\n" in data or b"\r" in data:
                        data = _escape(data)
                    write(
                        b"%s\t%d\t%s\t%s\t%s\t%s\t%s\n"
                        % (
                            host,
                            seq,
                            _copy_field(recorded_at),
                            prev_hash.encode("ascii", "replace"),
                            p_hash.encode("ascii", "replace"),
                            r_hash.encode("ascii", "replace"),
                            data,
                        )
                    )
                    self.count += 1
                if seq == held - 1:
                    self.hash_before_held = row[4]
                if seq == size - 1:
                    self.head_recorded_at = row[1]
            yield row


def _signer(cp: Checkpoint, hosts: Sequence[tuple[str, signing.PublicKey]]) -> tuple[str, Any]:
    for host_id, key in hosts:
        sig = cp.signature_by(cp.origin, note_key_hash(cp.origin, key.raw))
        if sig is not None and signing.check(key, cp.body, sig):
            return host_id, key
    raise FleetIngestRefusedError(
        "its checkpoint is not signed by the key of any trusted host (rensei fleet trust)"
    )


def _org(origin: str) -> str | None:
    parts = origin.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "rensei-routing" else None


def _start(path: Path) -> tuple[int, str, Iterator[Any]]:
    """The first seq and prev_hash an export continues from, and its rows (from the first)."""
    return export_start(export_rows(path))


def ingest_file(
    conn: psycopg.Connection[Any], export: Path, *, checkpoint: Path | None = None
) -> IngestResult:
    """Verify ``export`` against its checkpoint and its host's trusted key, then load what is
    new of it (see the module docstring).

    Raises:
        FleetIngestRefusedError: no or unreadable checkpoint, no trusted key signed it, the
            export does not verify against it (the first bad seq is named), the checkpoint
            does not cover it, a gap after the held chain, or the host forked before. Nothing
            loaded.
        FleetForkError: the export disagrees with what was ingested before: an alarm row names
            the host and seq; nothing loaded.
        FleetStoreError: the database failed (nothing loaded).
    """
    import psycopg

    cp_path = checkpoint or checkpoint_for(export)
    try:
        cp = read_checkpoint(cp_path)
    except (InputError, AuditError) as e:
        raise FleetIngestRefusedError(f"no usable checkpoint {cp_path}: {e}") from e
    host_id, key = _signer(cp, trusted_keys(conn))
    try:
        with conn.transaction():
            return _ingest_locked(conn, export, cp, host_id, key)
    except FleetForkError as fork:
        _alarm(conn, fork, str(export))
        raise
    except psycopg.errors.DataError as e:  # a record the database cannot hold (jsonb: \u0000)
        raise FleetIngestRefusedError(
            f"the database refused a record of it ({str(e).strip().splitlines()[0]}); "
            "nothing loaded",
            host_id=host_id,
        ) from e
    except psycopg.Error as e:
        raise store_error(f"cannot load {export} (nothing loaded)", e) from e


def _ingest_locked(
    conn: psycopg.Connection[Any], export: Path, cp: Checkpoint, host_id: str, key: Any
) -> IngestResult:
    row = conn.execute(
        "SELECT size, head_hash, forked_seq, checkpoint FROM fleet_hosts WHERE host_id = %s "
        "FOR UPDATE",
        (host_id,),
    ).fetchone()
    if row is None:  # untrusted between reading the keys and locking the row
        raise FleetIngestRefusedError(f"host {host_id} is no longer trusted", host_id=host_id)
    held, held_head, forked, held_note = row
    if forked is not None:
        raise FleetIngestRefusedError(
            f"host {host_id} forked at seq {forked} (see its alarm); refusing its exports",
            host_id=host_id,
            seq=forked,
        )
    try:
        start_seq, start_hash, rows = _start(export)
    except OSError as e:
        raise FleetIngestRefusedError(f"cannot read {export}: {e.strerror or e}") from e
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as out:
        spool = _Spool(host_id, held, cp.size, out)
        result = _verify(export, cp, key, start_seq, start_hash, spool.watch(rows))
        if not result:
            raise FleetIngestRefusedError(
                f"does not verify against its checkpoint (seq {result.first_broken_seq}: "
                f"{result.reason}: {result.detail}); nothing loaded",
                host_id=host_id,
                seq=result.first_broken_seq,
            )
        if spool.rows_seen and cp.size <= start_seq:
            raise FleetIngestRefusedError(
                f"its checkpoint (size {cp.size}) vouches for none of its records (seqs "
                f"{start_seq}..); nothing loaded",
                host_id=host_id,
            )
        if start_seq > held:
            raise FleetIngestRefusedError(
                f"starts at seq {start_seq} but host {host_id}'s ingested chain ends before seq "
                f"{held}: ingest the export of seqs {held}..{start_seq - 1} first",
                host_id=host_id,
                seq=held,
            )
        _check_continuity(conn, export, cp, host_id, held, held_head, start_seq, start_hash, spool)
        proof_path = consistency_for(export)
        check_against_held(host_id, held_note, cp, _read_proof(proof_path), str(proof_path))
        if spool.count:
            out.seek(0)
            with conn.cursor().copy(_COPY) as copy:
                while chunk := out.read(_COPY_CHUNK):
                    copy.write(chunk)
    added = spool.count
    if added:
        conn.execute(
            "UPDATE fleet_hosts SET size = %s, head_hash = %s, head_recorded_at = %s, "
            "org = COALESCE(%s, org), last_ingest_at = now() WHERE host_id = %s",
            (cp.size, chain_head(cp), spool.head_recorded_at, _org(cp.origin), host_id),
        )
        conn.execute(_REVISIONS, {"h": host_id, "s": held})
        accumulate(conn, host_id, held)
    else:
        conn.execute(
            "UPDATE fleet_hosts SET last_ingest_at = now(), org = COALESCE(org, %s) "
            "WHERE host_id = %s",
            (_org(cp.origin), host_id),
        )
    conn.execute(
        "UPDATE fleet_hosts SET checkpoint = %s WHERE host_id = %s",
        (held_after(held_note, cp), host_id),
    )
    now_held = max(held, cp.size)
    conn.execute(
        "INSERT INTO fleet_ingests(host_id, file, first_seq, added, checkpoint_size, head_hash) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (host_id, str(export), start_seq, added, cp.size, chain_head(cp)),
    )
    return IngestResult(
        file=str(export),
        host_id=host_id,
        first_seq=start_seq,
        checkpoint_size=cp.size,
        added=added,
        first_added=held if added else now_held,
        held=now_held,
        head_hash=chain_head(cp) if cp.size >= held else held_head,
        beyond=max(0, start_seq + spool.rows_seen - max(cp.size, start_seq)),
    )


def _read_proof(path: Path) -> bytes | None:
    """The bytes of a consistency proof file (at most one byte over its bound), ``None`` when
    there is none."""
    try:
        with open(path, "rb") as f:
            return f.read(ADD_CHECKPOINT_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise FleetIngestRefusedError(f"cannot read {path}: {e.strerror or e}") from e


def _verify(
    export: Path,
    cp: Checkpoint,
    key: signing.PublicKey,
    start_seq: int,
    start_hash: str,
    rows: Iterable[Sequence[Any]],
) -> VerifyResult:
    def signature_ok(c: Checkpoint) -> bool:
        sig = c.signature_by(c.origin, note_key_hash(c.origin, key.raw))
        return sig is not None and signing.check(key, c.body, sig)

    def again() -> Iterator[Any]:
        return _start(export)[2]

    try:
        return verify_chain(
            rows,
            checkpoints=[cp],
            signature_ok=signature_ok,
            start_seq=start_seq,
            start_hash=start_hash,
            rows_again=again,
        )
    except OSError as e:
        raise FleetIngestRefusedError(f"cannot read {export}: {e.strerror or e}") from e
    except InputError as e:
        raise FleetIngestRefusedError(str(e)) from e


def _check_continuity(
    conn: psycopg.Connection[Any],
    export: Path,
    cp: Checkpoint,
    host_id: str,
    held: int,
    held_head: str,
    start_seq: int,
    start_hash: str,
    spool: _Spool,
) -> None:
    """Raise :class:`FleetForkError` unless the verified export continues the held chain."""
    if held == 0:
        return
    if cp.size >= held:  # the export reaches the held head: its hash there must be ours
        theirs = spool.hash_before_held if start_seq < held else start_hash
        if theirs == held_head:
            return
    else:  # an older export: its checkpoint's head must be our record at its size
        if cp.size == 0:
            return
        ours = conn.execute(
            "SELECT record_hash FROM fleet_records WHERE host_id = %s AND seq = %s",
            (host_id, cp.size - 1),
        ).fetchone()
        if ours is not None and ours[0] == chain_head(cp):
            return
    seq = _first_difference(conn, export, host_id, start_seq, min(cp.size, held))
    raise FleetForkError(
        f"FORK: host {host_id}'s export disagrees with the chain ingested before, at seq {seq}; "
        "nothing loaded, an alarm is recorded and the host is refused until an operator acts",
        host_id=host_id,
        seq=seq,
    )


def _first_difference(
    conn: psycopg.Connection[Any], export: Path, host_id: str, start: int, stop: int
) -> int:
    """The first seq in ``start..stop-1`` where the export's record hash differs from the held
    one; ``start - 1`` when they all agree (the export's first ``prev_hash`` differs)."""
    with conn.cursor(name="fleet_fork_scan") as cur:
        cur.execute(
            "SELECT seq, record_hash FROM fleet_records WHERE host_id = %s AND seq >= %s "
            "AND seq < %s ORDER BY seq",
            (host_id, start, stop),
        )
        ours = iter(cur)
        for row in _start(export)[2]:
            if len(row) != len(ROW_COLUMNS) or type(row[0]) is not int or row[0] >= stop:
                break
            held = next(ours, None)
            if held is None or held[0] != row[0] or held[1] != row[4]:
                return int(row[0])
    return max(0, start - 1)


def _alarm(conn: psycopg.Connection[Any], fork: FleetForkError, file: str) -> None:
    """Record the fork alarm and mark the host forked (its own transaction)."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO fleet_alarms(host_id, kind, seq, file, detail) "
                "VALUES (%s, 'fork', %s, %s, %s)",
                (fork.host_id, fork.seq, file, str(fork)),
            )
            conn.execute(
                "UPDATE fleet_hosts SET forked_seq = COALESCE(forked_seq, %s), "
                "forked_at = COALESCE(forked_at, now()) WHERE host_id = %s",
                (fork.seq, fork.host_id),
            )
    except psycopg.Error as e:
        raise store_error(f"{fork}; and the alarm could not be recorded", e) from e


def ingest_paths(
    conn: psycopg.Connection[Any], paths: Sequence[Path]
) -> list[tuple[Path, IngestResult | FleetError]]:
    """Ingest every export named (files, or directories of ``*.jsonl``), each in its own
    transaction, in the order of their first seq; a refused file does not stop the others.

    Raises:
        InputError: a path does not exist, or names no export.
        FleetStoreError: the database failed on a file (those before it stay ingested).
    """
    from ..errors import FleetStoreError

    out: list[tuple[Path, IngestResult | FleetError]] = []
    for path in export_files(paths):
        try:
            out.append((path, ingest_file(conn, path)))
        except FleetStoreError:
            raise
        except FleetError as e:
            out.append((path, e))
    return out
