"""The evidence gate as a service: verify the chain, read the shadow evidence of one repository
on the governed transport in the window, resolve each recorded context under the revision being
armed, count, and append the verdict (``enforce-gate``, with its figures, bar, window, revision
and actor). The rules are ``core.enforce.gate``'s; this module reads and appends.

A chain that does not verify gives ``fail`` / ``evidence-unreadable`` and appends nothing:
nothing is written onto a chain nobody can read (the arm it guards is refused).
"""

from __future__ import annotations

import datetime as dt
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final

from ..core._parse import STRICT_DECODER
from ..core.audit.hydraflow import imported_payload
from ..core.enforce.bound import GOVERNED_TRANSPORT
from ..core.enforce.gate import (
    DEFAULT_BAR,
    GateBar,
    GateFigures,
    GateVerdict,
    gate_verdict,
)
from ..core.enforce.records import gate_record
from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.decision import STATE_OK
from ..core.routing.members import canonicalize_repo
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import explain
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.shadow.compare import NONE, ShadowDecision, compare, is_shadow_payload
from ..core.shadow.facts import micros_of
from ..core.timestamps import format_timestamp
from ..errors import EnforcementError, InputError, NotFoundError
from ..store.audit import AuditLog
from ..store.home import Home
from ..store.policies import PolicyStore

__all__ = [
    "CORRUPT_STORE",
    "NON_CANONICAL_REPO",
    "NO_REVISION",
    "GateRun",
    "canonical_repo",
    "pinned_revision",
    "run_gate",
]

NON_CANONICAL_REPO: Final = "non-canonical-repo"
NO_REVISION: Final = "no-policy-revision"
CORRUPT_STORE: Final = "policy-store-corrupt"
_SHADOW_MARK: Final = b'"shadow-decision"'


@dataclass(frozen=True, slots=True, kw_only=True)
class GateRun:
    """One gate run: the revision judged (and its hash), the figures, the verdict, and the seq
    of its record (``None``: not appended, the chain does not verify)."""

    repo: str
    revision: int
    policy_hash: str
    bar: GateBar
    since: str
    figures: GateFigures
    verdict: GateVerdict
    seq: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "transport": GOVERNED_TRANSPORT,
            "revision": self.revision,
            "policy_hash": self.policy_hash,
            "bar": self.bar.to_dict(),
            "since": self.since,
            "figures": self.figures.to_dict(),
            "verdict": self.verdict.verdict,
            "failed": list(self.verdict.failed),
            "seq": self.seq,
        }


def canonical_repo(value: str) -> str:
    """The canonical ``owner/name`` of a ``--repo`` value.

    Raises:
        EnforcementError: ``non-canonical-repo`` (a runtime slug, a URL, two slashes, ...).
    """
    repo = canonicalize_repo(value)
    if repo is None:
        raise EnforcementError(
            NON_CANONICAL_REPO,
            f"{value!r} is not a canonical owner/name repository; nothing was written",
        )
    return repo


def pinned_revision(
    home: Home, revision: int | None, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> PolicySnapshot:
    """The revision an arm would pin (``revision``, else the current one), loaded; refused
    when there is none, when it does not load, or when the current revision does not load
    (arming over a corrupt store).

    Raises:
        EnforcementError: ``no-policy-revision``, ``policy-store-corrupt``.
        HomeError, StoreError: the home or its database cannot be used.
    """
    with closing(home.connect()) as conn:
        store = PolicyStore(conn, vocabulary=vocabulary)
        head = store.head()
        if head is None:
            raise EnforcementError(NO_REVISION, "no policy revision is saved; nothing was written")
        current = store.load()
        if not current:
            raise EnforcementError(
                CORRUPT_STORE,
                f"the current policy revision {head[0]} does not load ({current.detail}); "
                "repair it (rensei policy rollback, or save over it) before arming; "
                "nothing was written",
            )
        if revision is None or revision == head[0]:
            return current.snapshot
        try:
            loaded = store.load(revision)
        except NotFoundError as e:
            raise EnforcementError(
                NO_REVISION, f"no policy revision {revision}; nothing was written"
            ) from e
        if not loaded:
            raise EnforcementError(
                CORRUPT_STORE,
                f"policy revision {revision} does not load ({loaded.detail}); nothing was written",
            )
        return loaded.snapshot


def run_gate(
    home: Home,
    repo: str,
    *,
    now: dt.datetime,
    actor: str,
    bar: GateBar = DEFAULT_BAR,
    revision: int | None = None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> GateRun:
    """Run the gate for ``repo`` (canonical) under ``revision`` (else the current one) over the
    shadow evidence recorded in the ``bar.window_s`` seconds before ``now``, and append its
    verdict, by ``actor``, unless the chain does not verify.

    Raises:
        EnforcementError: ``no-policy-revision``, ``policy-store-corrupt`` (nothing written).
        InputError: ``bar`` is out of range (nothing written).
        HomeError, StoreError: the home or its database cannot be used (nothing written).
    """
    _check_bar(bar)
    snapshot = pinned_revision(home, revision, vocabulary)
    until = format_timestamp(now)
    since_at = now - dt.timedelta(seconds=bar.window_s)
    since = format_timestamp(since_at)
    figures = GateFigures()
    seq: int | None = None
    with AuditLog.open(home, redactor=redactor) as log:
        verdict_of_chain = log.verify()
        if verdict_of_chain:
            _count(log, repo, since, until, snapshot, vocabulary, figures)
            verdict = gate_verdict(figures, bar)
            record = gate_record(
                recorded_at=until,
                actor=actor,
                repo=repo,
                revision=snapshot.revision,
                policy_hash=snapshot.content_hash,
                bar=bar,
                since=since,
                figures=figures,
                verdict=verdict,
                chain_size=verdict_of_chain.records_checked,
            )
            seq = log.append(record, recorded_at=until).seq
        else:  # evidence nobody can read: fail, and nothing is written onto that chain
            verdict = gate_verdict(figures, bar, readable=False)
    return GateRun(
        repo=repo,
        revision=snapshot.revision,
        policy_hash=snapshot.content_hash,
        bar=bar,
        since=since,
        figures=figures,
        verdict=verdict,
        seq=seq,
    )


def _check_bar(bar: GateBar) -> None:
    if bar.window_s <= 0:
        raise InputError("the gate's window must be longer than 0 seconds")
    if bar.min_samples < 1:
        raise InputError("--min-samples must be at least 1")
    if not 0.0 <= bar.max_refusal_rate <= 1.0:
        raise InputError("--max-refusal-rate must be a fraction between 0 and 1")
    if bar.min_agreement is not None and not 0.0 <= bar.min_agreement <= 1.0:
        raise InputError("--min-agreement must be a fraction between 0 and 1")


def _count(
    log: AuditLog,
    repo: str,
    since: str,
    until: str,
    snapshot: PolicySnapshot,
    vocabulary: Vocabulary,
    figures: GateFigures,
) -> None:
    """Count every shadow record of ``repo`` on the governed transport recorded in
    ``[since, until]``, its context resolved under ``snapshot``. A record that does not read
    as a shadow record is not evidence (the chain verified, so it is what was written)."""
    needle = repo.encode()
    since_us, until_us = micros_of(since), micros_of(until)
    for record in log.records():
        data = record.payload_bytes
        if _SHADOW_MARK not in data or needle not in data:
            continue
        try:
            if not since_us <= micros_of(record.recorded_at) <= until_us:
                continue
            doc = imported_payload(STRICT_DECODER.decode(data.decode("utf-8")))
            if not is_shadow_payload(doc):
                continue
            shadow = ShadowDecision.from_dict(doc, vocabulary=vocabulary, redacted=True)
        except (InputError, ValueError, RecursionError, UnicodeDecodeError):
            continue
        if shadow.actual.transport != GOVERNED_TRANSPORT:
            continue
        context = shadow.proposed.explanation.context
        if context.repo is None or not context.repo.canonical or context.repo.value != repo:
            continue
        decision = explain(context, snapshot, snapshot_state=STATE_OK, vocabulary=vocabulary)
        figures.add(record.seq, decision, compare(decision, shadow.actual) == NONE)
