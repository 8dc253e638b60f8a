"""Recording many checked spawns as shadow decisions (``shadow record``, quickstart): against one
policy revision, in transactions of ``batch``, each record added to a report as it commits.

Owns the batching and what a failure after the first batch means (a typed
:class:`~rensei_routing.errors.PartialRecordError` saying what was kept); the recording itself is
:class:`~rensei_routing.shadow.recorder.ShadowRecorder`'s. The clock and the progress display are
the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ..core.redact import Redactor
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import Trace
from ..core.routing.vocabulary import Vocabulary
from ..core.shadow.report import ShadowReport
from ..core.shadow.spawn import Spawn
from ..errors import PartialRecordError, RenseiRoutingError
from ..plugins.manager import SeamRegistry
from ..store.home import Home
from .recorder import ShadowRecorder

__all__ = ["DEFAULT_BATCH", "Recorded", "record_spawns"]

#: Spawns per transaction by default.
DEFAULT_BATCH: Final = 5_000


@dataclass(frozen=True, slots=True)
class Recorded:
    """What :func:`record_spawns` committed: the seqs (``None`` when nothing) and the policy
    revision with its load state."""

    first_seq: int | None
    last_seq: int | None
    snapshot: tuple[PolicySnapshot, str]

    @property
    def seqs(self) -> range:
        """The committed seqs (empty when nothing was recorded)."""
        if self.first_seq is None or self.last_seq is None:
            return range(0)
        return range(self.first_seq, self.last_seq + 1)


def record_spawns(
    home: Home,
    registry: SeamRegistry,
    items: Sequence[Spawn],
    *,
    clock: Callable[[], str],
    vocabulary: Vocabulary,
    redactor: Redactor,
    report: ShadowReport,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[int], None] | None = None,
    trace: Trace = "auto",
) -> Recorded:
    """Record checked spawns against one policy revision, ``batch`` per transaction, adding
    each record to ``report``; ``progress(n)`` after each committed batch of ``n``. ``trace``:
    the explanation each record stores (see :class:`ShadowRecorder`; ``auto``: compact).

    Raises:
        RenseiRoutingError: the first batch failed (nothing was recorded).
        PartialRecordError: a later batch failed (its message says what was recorded).
    """
    first_seq: int | None = None
    last_seq: int | None = None
    with ShadowRecorder(
        home, registry, clock=clock, vocabulary=vocabulary, redactor=redactor, trace=trace
    ) as recorder:
        snapshot = recorder.snapshot()
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            try:
                records, result = recorder.record_many(chunk, snapshot=snapshot)
            except RenseiRoutingError as e:
                if not start:
                    raise  # nothing was recorded
                raise PartialRecordError(
                    f"recorded {start:,} of {len(items):,} spawns "
                    f"(seqs {first_seq}..{last_seq}), then: {e}"
                ) from e
            for r in records:
                report.add(r)
            if first_seq is None:
                first_seq = result.first_seq
            last_seq = result.first_seq + result.count - 1
            if progress is not None:
                progress(len(chunk))
    return Recorded(first_seq, last_seq, snapshot)
