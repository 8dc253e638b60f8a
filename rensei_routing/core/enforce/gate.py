"""The evidence gate, pure: the bar an arm declares (samples, refusal rate, agreement), the
figures counted over recorded shadow evidence re-resolved under the revision being armed, and
the verdict they give (``pass``, ``fail`` naming each failed figure, or ``inconclusive``). No
I/O: the service reads and verifies the chain, resolves the contexts and hands each one in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from ..routing.decision import HELD, REJECTED, SELECTED, RouteDecision

__all__ = [
    "AGREEMENT",
    "DEFAULT_BAR",
    "DEFAULT_MIN_SAMPLES",
    "DEFAULT_WINDOW_S",
    "EVIDENCE_UNREADABLE",
    "FAIL",
    "INCONCLUSIVE",
    "PASS",
    "REFUSAL_RATE",
    "SAMPLES",
    "VERDICTS",
    "GateBar",
    "GateFigures",
    "GateVerdict",
    "gate_verdict",
]

PASS: Final = "pass"
FAIL: Final = "fail"
INCONCLUSIVE: Final = "inconclusive"
VERDICTS: Final = (PASS, FAIL, INCONCLUSIVE)

# The figures a verdict can name as failed.
#: Fewer spawns than the bar asks for (an ``inconclusive`` verdict names it).
SAMPLES: Final = "samples"
#: More of the spawns would be refused (held or rejected) than the bar allows.
REFUSAL_RATE: Final = "refusal-rate"
#: Fewer of the spawns would keep their legacy route than the bar asks for.
AGREEMENT: Final = "agreement"
#: The chain does not verify: nobody can read the evidence, so it never passes.
EVIDENCE_UNREADABLE: Final = "evidence-unreadable"

DEFAULT_MIN_SAMPLES: Final = 50
DEFAULT_WINDOW_S: Final = 7 * 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class GateBar:
    """What the evidence must show: at least ``min_samples`` spawns in the trailing
    ``window_s`` seconds; a refusal rate at most ``max_refusal_rate``; an agreement with the
    legacy routes at least ``min_agreement`` when given (rates are fractions, 0..1)."""

    window_s: int = DEFAULT_WINDOW_S
    min_samples: int = DEFAULT_MIN_SAMPLES
    max_refusal_rate: float = 0.0
    min_agreement: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "min_samples": self.min_samples,
            "max_refusal_rate": self.max_refusal_rate,
            "min_agreement": self.min_agreement,
        }


@dataclass(slots=True, kw_only=True)
class GateFigures:
    """The counts over the evidence: spawns, their outcomes under the revision being armed,
    and how many of the selected ones keep the route that ran (``agreed``)."""

    samples: int = 0
    selected: int = 0
    held: int = 0
    rejected: int = 0
    agreed: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    _seen: set[int] = field(default_factory=set, repr=False)

    def add(self, seq: int, decision: RouteDecision, agreed: bool) -> None:
        """Count one spawn (the record at ``seq``) resolved to ``decision``; ``agreed``: the
        decision keeps the route the spawn ran (compare's ``none`` divergence)."""
        self.samples += 1
        outcome = decision.outcome
        if outcome == SELECTED:
            self.selected += 1
        elif outcome == HELD:
            self.held += 1
        elif outcome == REJECTED:
            self.rejected += 1
        if agreed:
            self.agreed += 1
        self.first_seq = seq if self.first_seq is None else min(self.first_seq, seq)
        self.last_seq = seq if self.last_seq is None else max(self.last_seq, seq)

    @property
    def refusals(self) -> int:
        return self.held + self.rejected

    @property
    def refusal_rate(self) -> float:
        return self.refusals / self.samples if self.samples else 0.0

    @property
    def agreement(self) -> float:
        return self.agreed / self.samples if self.samples else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "selected": self.selected,
            "held": self.held,
            "rejected": self.rejected,
            "agreed": self.agreed,
            "refusal_rate": round(self.refusal_rate, 6),
            "agreement": round(self.agreement, 6),
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GateVerdict:
    """``verdict`` with the figures it names as failed (``fail``: each figure that failed;
    ``inconclusive``: ``samples``; ``pass``: none). Truthy only for ``pass``."""

    verdict: str
    failed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.verdict == PASS


#: The bar of an arm that declares none.
DEFAULT_BAR: Final = GateBar()


def gate_verdict(figures: GateFigures, bar: GateBar, *, readable: bool = True) -> GateVerdict:
    """The verdict of ``figures`` against ``bar``. An unreadable chain (``readable`` false)
    fails with ``evidence-unreadable`` whatever was counted; too few samples is
    ``inconclusive`` (never a pass, whatever the other figures); otherwise every figure over
    its bar is named and any one of them fails the gate."""
    if not readable:
        return GateVerdict(verdict=FAIL, failed=(EVIDENCE_UNREADABLE,))
    if figures.samples < bar.min_samples or figures.samples == 0:
        return GateVerdict(verdict=INCONCLUSIVE, failed=(SAMPLES,))
    failed: list[str] = []
    if figures.refusal_rate > bar.max_refusal_rate:
        failed.append(REFUSAL_RATE)
    if bar.min_agreement is not None and figures.agreement < bar.min_agreement:
        failed.append(AGREEMENT)
    return GateVerdict(verdict=FAIL if failed else PASS, failed=tuple(failed))
