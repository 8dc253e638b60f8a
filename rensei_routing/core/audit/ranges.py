"""Verification cut into ranges: the pure rules that make a walk checked in pieces (each in its
own worker, in any order) reach exactly the verdict of one walk from genesis. No I/O: the store
reads the rows (:mod:`rensei_routing.store.parallel`).

The chain is cut by seq value into consecutive ranges ``[lo, hi)``. A range is checked by
:func:`check_range`: its first stored row (the *seam row*) is set aside, and the rest are walked
(:func:`.chain.walk_range`, the one walk's own code) from the state that row implies: ``expected
= its seq + 1``, ``prev = its record_hash``. :func:`join` then goes through the ranges in order
carrying the true state ``(expected, prev)`` of a single walk: it walks each seam row from that
state (the same code again), and, if the seam row passes, the state after it is exactly the one
the range was walked from (a passing row has ``seq == expected``; its record hash becomes
``prev``), so the range's outcome *is* the single walk's outcome over those rows. The first
failure met in order is therefore the single walk's first failure, with the same seq, reason
and detail; ranges after it need not be looked at. An empty range changes no state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .chain import end_of_log, walk_range
from .verdict import VerifyResult

__all__ = ["RangeOutcome", "check_range", "join"]


@dataclass(frozen=True, slots=True)
class RangeOutcome:
    """One range checked: its seam row (``None`` when the range holds no row) and the walk of
    the rows after it from the state that row implies."""

    seam: tuple[Any, ...] | None
    rest: VerifyResult | None


def check_range(
    rows: Iterable[Sequence[Any]],
    marks: dict[int, list[str]],
    *,
    parsed_below: int,
    progress: Callable[[int], None] | None = None,
) -> RangeOutcome:
    """Check one range's rows (ascending seq, ``ROW_COLUMNS`` order); see the module docstring.
    ``progress(seq)`` as :func:`.chain.verify_chain` calls it (absolute seqs)."""
    it = iter(rows)
    seam = next(it, None)
    if seam is None:
        return RangeOutcome(None, None)
    first = tuple(seam)
    seq, r_hash = first[0], first[4]
    if type(seq) is not int or type(r_hash) is not str:
        # Such a seam row fails its own walk in :func:`join`; nothing after it counts.
        return RangeOutcome(first, None)
    rest = walk_range(
        it, marks, expected=seq + 1, prev=r_hash, parsed_below=parsed_below, progress=progress
    )
    return RangeOutcome(first, rest)


def join(
    outcomes: Iterable[RangeOutcome],
    marks: dict[int, list[str]],
    *,
    checkpoints: int,
    parsed_below: int,
    start_seq: int = 0,
    start_hash: str,
) -> VerifyResult:
    """The single walk's verdict from the ranges' outcomes, given in seq order (consumed only
    as far as the first failure). ``checkpoints`` is the number checked (for the verdict)."""
    expected, prev = start_seq, start_hash
    for outcome in outcomes:
        if outcome.seam is None:
            continue
        seam = walk_range(
            (outcome.seam,), marks, expected=expected, prev=prev, parsed_below=parsed_below
        )
        if not seam.ok:
            return seam
        rest = outcome.rest
        assert rest is not None  # a seam row that passes has an int seq and a str hash
        if not rest.ok:
            return rest
        expected, prev = rest.records_checked, rest.head_hash
    return end_of_log(marks, checkpoints, expected, prev)
