"""``rensei fleet repair``: a host's held copy truncated at a seq, after a fork was
investigated, so its genuine export can be ingested again. Owns the repair rule; must not
ingest (:mod:`.ingest`) or decide which copy is genuine (the operator does).

One transaction, the host's row locked (as an ingest locks it):

1. The host must be trusted; the seq ``N`` defaults to the seq of its fork and must lie within
   what is held (``N <= size``). On a forked host, ``N`` must not keep a disputed record: ``N``
   at or below the fork's seq (drop the held copy from there), or ``N = size`` (keep the held
   copy: the refused file was the impostor; only the fork mark is cleared).
2. Its records from ``N`` on are deleted, and its report counts (``fleet_agreement``) rebuilt
   from the records it still holds, so the report's figures are those of the records held.
3. ``size = N``, the head is the held record at ``N - 1`` (its hash and ``recorded_at``;
   genesis for 0), the fork mark is cleared, and the snapshot and policy revisions cited are
   those of the records kept. When records were dropped, the checkpoint held is forgotten too
   (it may be the impostor's): the next one ingested is checked by the chain alone.
4. A ``repair`` row in ``fleet_alarms`` says what was done (the fork's alarm row stays).

Any refusal (:class:`~rensei_routing.errors.FleetRepairError`) rolls back: nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..core.audit.chain import GENESIS_HASH
from ..errors import FleetRepairError, InputError
from .db import store_error
from .report import accumulate
from .trust import check_host_id

if TYPE_CHECKING:
    import psycopg

__all__ = ["RepairResult", "repair_host"]

#: The revisions the kept records cite (the newest citing each), as an ingest derives them.
_REVISIONS: Final = """
UPDATE fleet_hosts h SET ruleset_rev = n.ruleset_rev,
    snapshot_revision = substring(n.ruleset_rev from '@([0-9]{1,18})$')::bigint,
    policy_revision = p.policy_revision
FROM (SELECT (SELECT ruleset_rev FROM fleet_records WHERE host_id = %(h)s
              AND ruleset_rev IS NOT NULL ORDER BY seq DESC LIMIT 1) AS ruleset_rev) n,
     (SELECT (SELECT policy_revision FROM fleet_records WHERE host_id = %(h)s
              AND policy_revision IS NOT NULL ORDER BY seq DESC LIMIT 1) AS policy_revision) p
WHERE h.host_id = %(h)s
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairResult:
    """One repair: ``host_id``'s copy truncated at ``at`` (``removed`` records deleted), now
    holding ``held`` records up to ``head_hash``; ``fork_cleared`` is the seq of the fork whose
    mark was cleared (``None`` when the host had not forked)."""

    host_id: str
    at: int
    removed: int
    held: int
    head_hash: str
    fork_cleared: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "host_id": self.host_id,
            "at": self.at,
            "removed": self.removed,
            "held": self.held,
            "head_hash": self.head_hash,
            "fork_cleared": self.fork_cleared,
        }


def repair_host(conn: psycopg.Connection[Any], host_id: str, at: int | None = None) -> RepairResult:
    """Truncate ``host_id``'s held copy at seq ``at`` (default: its fork's seq), its report
    counts with it, in one transaction (see the module docstring).

    Raises:
        InputError: ``host_id`` is not a host id, or ``at`` is negative.
        FleetRepairError: the host is not trusted, it has not forked and no seq is named, the
            seq lies past the records held or inside a fork's disputed records, or the held copy
            lacks the record before it. Nothing changed.
        FleetStoreError: the database failed (nothing changed).
    """
    import psycopg

    check_host_id(host_id)
    if at is not None and (type(at) is not int or at < 0):
        raise InputError(f"not a seq (a whole number, 0 or more): {at!r}")
    try:
        with conn.transaction():
            return _repair_locked(conn, host_id, at)
    except psycopg.Error as e:
        raise store_error(f"cannot repair host {host_id} (nothing changed)", e) from e


def _repair_locked(conn: psycopg.Connection[Any], host_id: str, at: int | None) -> RepairResult:
    row = conn.execute(
        "SELECT size, forked_seq FROM fleet_hosts WHERE host_id = %s FOR UPDATE", (host_id,)
    ).fetchone()
    if row is None:
        raise FleetRepairError(f"host {host_id} is not trusted in this fleet database")
    size, forked = int(row[0]), row[1]
    if at is None:
        if forked is None:
            raise FleetRepairError(
                f"host {host_id} has not forked: name the seq to truncate its copy at (--at)"
            )
        at = int(forked)
    if at > size:
        raise FleetRepairError(
            f"host {host_id} holds {size:,} record(s) (seqs 0..{size - 1}): cannot truncate at "
            f"seq {at}"
            if size
            else f"host {host_id} holds no records: cannot truncate at seq {at}"
        )
    if forked is not None and forked < at < size:
        raise FleetRepairError(
            f"host {host_id} forked at seq {forked}: truncating at seq {at} keeps the disputed "
            f"records {forked}..{at - 1}; truncate at seq {forked} or below, or at {size} to "
            "keep the held copy"
        )
    head_hash, head_at = GENESIS_HASH, None
    if at:
        head = conn.execute(
            "SELECT record_hash, recorded_at FROM fleet_records WHERE host_id = %s AND seq = %s",
            (host_id, at - 1),
        ).fetchone()
        if head is None:
            raise FleetRepairError(
                f"host {host_id}'s held copy lacks its record at seq {at - 1}: truncate at a "
                "lower seq"
            )
        head_hash, head_at = head
    removed = conn.execute(
        "DELETE FROM fleet_records WHERE host_id = %s AND seq >= %s", (host_id, at)
    ).rowcount
    conn.execute("DELETE FROM fleet_agreement WHERE host_id = %s", (host_id,))
    accumulate(conn, host_id, 0)
    conn.execute(
        "UPDATE fleet_hosts SET size = %s, head_hash = %s, head_recorded_at = %s::timestamptz, "
        "forked_seq = NULL, forked_at = NULL, "
        "checkpoint = CASE WHEN %s < size THEN NULL ELSE checkpoint END WHERE host_id = %s",
        (at, head_hash, head_at, at, host_id),
    )
    conn.execute(_REVISIONS, {"h": host_id})
    cleared = f"; the fork at seq {forked} cleared" if forked is not None else ""
    conn.execute(
        "INSERT INTO fleet_alarms(host_id, kind, seq, file, detail) "
        "VALUES (%s, 'repair', %s, '', %s)",
        (
            host_id,
            at,
            f"REPAIR: host {host_id}'s copy truncated at seq {at}: {removed:,} record(s) "
            f"removed, {at:,} held{cleared}",
        ),
    )
    return RepairResult(
        host_id=host_id,
        at=at,
        removed=removed,
        held=at,
        head_hash=head_hash,
        fork_cleared=None if forked is None else int(forked),
    )
