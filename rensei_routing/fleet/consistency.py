"""The fleet ingest's tree check: a host's new checkpoint against the one the fleet holds, by a
consistency proof. Owns which proof an ingest needs and what a failing one means; the proof
format and its check are :mod:`rensei_routing.core.audit.tlog`'s, the forms
:mod:`rensei_routing.core.audit.treehead`'s. Pure: the held note, the new checkpoint and the
proof's bytes are arguments.

The fleet holds, per host, the latest tree-root checkpoint it ingested (``fleet_hosts
.checkpoint``). A new tree-root checkpoint of that host is checked against it:

* the same size: the roots must be equal (no proof needed);
* a larger size: the export must come with ``NAME.consistency`` beside ``NAME.jsonl``: the
  add-checkpoint body ``rensei audit consistency OLD NAME.checkpoint -o NAME.consistency``
  writes in the host's home, from the size the fleet holds to the new checkpoint;
* a smaller size (an older export): nothing more than the chain check (its head against the
  records held).

Two checkpoints of one origin whose roots differ at one size, or that a well-formed proof for
exactly those two does not join, are a **fork** (:class:`~rensei_routing.errors.FleetForkError`:
the ingest rolls back, records an alarm and refuses the host from then on). Its ``seq`` is the
last seq the held checkpoint covers: the two histories differ at or before it. A missing proof,
one that does not parse, starts from another size or ends at another checkpoint proves nothing
either way: the export is refused (:class:`~rensei_routing.errors.FleetIngestRefusedError`,
nothing loaded, the host not marked), and the message names the command that writes the right
one; so is a checkpoint of another origin than the one held (another log, not a fork of this
one). Checkpoints of the head-hash form (earlier releases) are checked by the chain alone.
"""

from __future__ import annotations

from ..core.audit.note import Checkpoint, parse_checkpoint
from ..core.audit.tlog import check_consistent, parse_add_checkpoint
from ..core.audit.treehead import form
from ..errors import EvidenceError, FleetForkError, FleetIngestRefusedError

__all__ = ["check_against_held", "held_after"]


def _fork(host_id: str, held: Checkpoint, new: Checkpoint, why: str) -> FleetForkError:
    return FleetForkError(
        f"FORK: host {host_id}'s checkpoints of size {held.size} and {new.size} are not one "
        f"history ({why}); they differ at or before seq {held.size - 1}; nothing loaded, an "
        "alarm is recorded and the host is refused until an operator acts",
        host_id=host_id,
        seq=max(0, held.size - 1),
    )


def check_against_held(
    host_id: str, held_note: str | None, new: Checkpoint, proof: bytes | None, proof_name: str
) -> None:
    """Check the new checkpoint ``new`` of ``host_id`` against the held one (``held_note``:
    the note text, ``None`` when none is held) with the consistency body ``proof`` (``None``
    when the file ``proof_name`` is absent).

    Raises:
        FleetForkError: the two are not one history (see the module docstring).
        FleetIngestRefusedError: a proof is needed and is absent or unusable.
    """
    if held_note is None or form(new) != "tree-root":
        return
    held = parse_checkpoint(held_note)
    if form(held) != "tree-root" or new.size < held.size:
        return
    if held.origin != new.origin:
        raise FleetIngestRefusedError(
            f"its checkpoint is of origin {new.origin!r}, the one held of {held.origin!r}: "
            "not one log; nothing loaded",
            host_id=host_id,
        )
    if new.size == held.size:
        if new.root != held.root:
            raise _fork(host_id, held, new, "conflict: another root at the same size")
        return
    command = (
        f"rensei audit consistency {held.size} NAME.checkpoint -o NAME.consistency in the host's "
        "home"
    )
    if proof is None:
        raise FleetIngestRefusedError(
            f"needs a consistency proof from size {held.size} (the checkpoint held) to "
            f"{new.size}: {proof_name} is missing ({command}); nothing loaded",
            host_id=host_id,
        )
    try:
        body = parse_add_checkpoint(proof)
    except EvidenceError as e:
        raise FleetIngestRefusedError(
            f"{proof_name} is no consistency proof ({e}); nothing loaded", host_id=host_id
        ) from e
    if body.old_size != held.size or body.checkpoint.body != new.body:
        raise FleetIngestRefusedError(
            f"{proof_name} proves size {body.old_size} -> {body.checkpoint.size}, not the "
            f"checkpoint held (size {held.size}) -> this export's ({new.size}): {command}; "
            "nothing loaded",
            host_id=host_id,
        )
    try:
        check_consistent(held, new, body.proof)
    except EvidenceError as e:
        raise _fork(host_id, held, new, f"{e.verdict}: {e}") from e


def held_after(held_note: str | None, new: Checkpoint) -> str | None:
    """The note the fleet holds once ``new`` is ingested: ``new`` when it is of the tree-root
    form and no smaller than the one held, else the one held."""
    if form(new) != "tree-root":
        return held_note
    if held_note is not None and parse_checkpoint(held_note).size > new.size:
        return held_note
    return new.to_text()
