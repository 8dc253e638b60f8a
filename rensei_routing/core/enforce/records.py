"""The audit records of enforcement, pure: one canonical payload per enforced decision
(refusals included; its envelope holds only what its decision does not, and
:func:`enforced_view` reads it back whole with its lineage and ``enforced: true``), per arm,
disarm, gate verdict and trip (each with its actor). The service appends them; nothing here reads
or writes.
"""

from __future__ import annotations

from typing import Any, Final

from ..audit.chain import encode_payload as encode_payload_plain
from ..canonical import json_string
from ..redact import Redactor
from ..routing.decision import RouteDecision
from ..routing.ids import ScanMemo
from .bound import GOVERNED_TRANSPORT
from .gate import GateBar, GateFigures, GateVerdict
from .route import ENFORCED as ENFORCED_ANSWER

__all__ = [
    "ARM_RECORD",
    "DECISION_RECORD",
    "DISARM_RECORD",
    "ENFORCE_RECORDS",
    "GATE_RECORD",
    "SCHEMA_VERSION",
    "TRIP_ACTOR",
    "TRIP_RECORD",
    "RecordTemplate",
    "arm_record",
    "decision_record",
    "decision_template",
    "disarm_record",
    "encode_decision_record",
    "enforced_view",
    "gate_record",
    "lineage_of",
    "trip_record",
]

DECISION_RECORD: Final = "enforced-decision"
ARM_RECORD: Final = "enforce-arm"
DISARM_RECORD: Final = "enforce-disarm"
GATE_RECORD: Final = "enforce-gate"
TRIP_RECORD: Final = "enforce-trip"
ENFORCE_RECORDS: Final = (DECISION_RECORD, ARM_RECORD, DISARM_RECORD, GATE_RECORD, TRIP_RECORD)
SCHEMA_VERSION: Final = 1
_REFUSED: Final = ("held", "rejected")
_MAX_SAFE_INT: Final = 2**53 - 1
#: The optional envelope members :func:`_direct` writes.
_DIRECT_KEYS: Final = frozenset(("lineage", "principal_id", "repo", "route"))
#: Every object key an enforced decision record holds outside its decision.
ENVELOPE_KEYS: Final = (
    "record_type",
    "schema_version",
    "recorded_at",
    "seam",
    "answer",
    "decision",
    "principal_id",
    "repo",
    "route",
    "provider",
    "account_id",
    "model",
    "lineage",
    "revision",
    "policy_hash",
)
#: The provider a route names when it stores none: the gateway provider, whose transport is the
#: governed one (a governed spawn's provider is nearly always it).
_DEFAULT_PROVIDER: Final = "gateway"
#: The actor of a trip: the canary disarmed itself (the record also names who armed it).
TRIP_ACTOR: Final = "enforcer"


def decision_record(
    *,
    recorded_at: str,
    seam: str,
    principal_id: str | None,
    repo: str,
    answer: str,
    provider: str,
    account_id: str | None,
    model: str | None,
    revision: int,
    policy_hash: str,
    decision: RouteDecision,
) -> dict[str, Any]:
    """One enforced decision: what the canary answered (``answer``: a route kind or a refusal
    code), the route applied (``None`` for a refusal), its lineage (policy id, pinned revision,
    that revision's hash, decision id) and the whole decision with its explanation (under
    ``decision``, not ``proposed``: shadow reports and what-if do not count it as a recorded
    spawn). The decision carries the compact explanation a recorder resolves with
    (``RECORD_TRACE``).

    The envelope stores only what the decision does not already hold; :func:`enforced_view`
    puts the rest back: ``enforced: true`` and the transport (always the governed one), the
    principal and repository when they are the context's, the route when it is implied (none
    for a refusal; else its provider when it is ``gateway``, its account and model when they
    are the ones the answer implies (the decision's for ``enforced``, the legacy route's for
    ``legacy-compatible``)), and the lineage's revision and hash when they are the decision's
    (:func:`lineage_of` adds its policy id and decision id)."""
    record: dict[str, Any] = {
        "record_type": DECISION_RECORD,
        "schema_version": SCHEMA_VERSION,
        "recorded_at": recorded_at,
        "seam": seam,
        "answer": answer,
        "decision": decision.to_dict(),
    }
    implied = _implied_route(answer, record["decision"])
    _envelope(record, decision, principal_id, repo, answer, provider, account_id, model, implied)
    _lineage(record, decision, revision, policy_hash)
    return record


def encode_decision_record(
    redactor: Redactor,
    scan: ScanMemo | None = None,
    *,
    recorded_at: str,
    seam: str,
    principal_id: str | None,
    repo: str,
    answer: str,
    provider: str,
    account_id: str | None,
    model: str | None,
    revision: int,
    policy_hash: str,
    decision: RouteDecision,
) -> bytes:
    """The stored bytes of :func:`decision_record`'s record, byte for byte what
    ``encode_payload(decision_record(...), redactor)`` gives, written from the texts the
    decision already keeps: the decision's own canonical bytes (:meth:`RouteDecision.canonical`,
    no dict of it built or walked) spliced into the envelope's. A record the redactor might
    change takes the plain path (a dict redacted and encoded again).

    ``scan`` (a memo of ``redactor``'s, kept across calls) answers the redaction pre-check from
    the strings the record holds, each scanned once per memo (see :class:`ScanMemo`); without
    it the record's whole text is scanned, as :func:`encode_payload_plain` does."""
    fields: dict[str, Any] = {
        "seam": seam,
        "principal_id": principal_id,
        "repo": repo,
        "answer": answer,
        "provider": provider,
        "account_id": account_id,
        "model": model,
        "revision": revision,
        "policy_hash": policy_hash,
        "decision": decision,
    }
    data: bytes | None = None
    if scan is None:
        template = decision_template(redactor, None, **fields)
        if template is not None:
            data = template.splice(recorded_at)
            if data is not None and redactor.might_match(data.decode("utf-8")):
                data = None  # the whole text is scanned, as the plain encoder does
    else:
        template = decision_template(redactor, scan, **fields)
        data = None if template is None else template.encode(redactor, recorded_at)
    if data is not None:
        return data
    return encode_payload_plain(decision_record(recorded_at=recorded_at, **fields), redactor)


class RecordTemplate:
    """The stored bytes of one enforced decision's record around its time: every request with
    the same decision, envelope and redactor stores ``head`` + the time's JSON string +
    ``tail`` (:func:`decision_template` makes one; :meth:`encode` writes a record from it)."""

    __slots__ = ("head", "tail")

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head = head
        self.tail = tail

    def splice(self, recorded_at: str) -> bytes | None:
        """The record's bytes at ``recorded_at`` (``None``: a lone surrogate in it)."""
        try:
            return b"".join((self.head, json_string(recorded_at).encode("utf-8"), self.tail))
        except UnicodeEncodeError:  # the plain encoder's fallback decides
            return None

    def encode(self, redactor: Redactor, recorded_at: str) -> bytes | None:
        """:func:`encode_decision_record`'s bytes at ``recorded_at``, or ``None`` when the
        redactor might change the time (the caller takes the plain path)."""
        if redactor.might_match(recorded_at):
            return None
        return self.splice(recorded_at)


def decision_template(
    redactor: Redactor,
    scan: ScanMemo | None,
    *,
    seam: str,
    principal_id: str | None,
    repo: str,
    answer: str,
    provider: str,
    account_id: str | None,
    model: str | None,
    revision: int,
    policy_hash: str,
    decision: RouteDecision,
) -> RecordTemplate | None:
    """The record of :func:`encode_decision_record` with these values, whatever its time, or
    ``None`` when the redactor might change one of its strings but the time (``scan``
    answers the pre-check) or a value is outside what is written directly: such a record
    takes the plain path. With no ``scan`` no string is checked here (the caller scans the
    whole text)."""
    envelope: dict[str, Any] = {}
    _envelope(
        envelope,
        decision,
        principal_id,
        repo,
        answer,
        provider,
        account_id,
        model,
        _implied_of(answer, decision),
    )
    _lineage(envelope, decision, revision, policy_hash)
    # Every string of the record but its time: the decision's, then the envelope's keys and
    # values.
    if scan is not None and (
        scan.record_may_redact(decision, None)
        or scan.may_redact(ENVELOPE_KEYS)
        or scan.may_redact(
            (DECISION_RECORD, seam, answer, principal_id, repo, provider, account_id, model)
        )
        or scan.may_redact((policy_hash,))
    ):
        return None
    return _direct(envelope, seam, answer, decision)


def _direct(
    envelope: dict[str, Any], seam: str, answer: str, decision: RouteDecision
) -> RecordTemplate | None:
    """The record's RFC 8785 bytes before and after its time, written in its members' order
    (``answer``, ``decision``, ``lineage``, ``principal_id``, ``record_type``, ``recorded_at``,
    ``repo``, ``route``, ``schema_version``, ``seam``; the optional ones as ``envelope`` holds
    them), or ``None`` for a value outside what this writes (it is left to the plain
    encoder)."""
    if not envelope.keys() <= _DIRECT_KEYS:
        return None
    lineage = envelope.get("lineage")
    parts = ['{"answer":', json_string(answer), ',"decision":', decision.canonical().decode()]
    if lineage is not None:
        revision = lineage.get("revision")
        if revision is not None and (type(revision) is not int or abs(revision) > _MAX_SAFE_INT):
            return None
        members = []
        if "policy_hash" in lineage:
            members.append('"policy_hash":' + json_string(lineage["policy_hash"]))
        if revision is not None:
            members.append(f'"revision":{revision}')
        parts += (',"lineage":{', ",".join(members), "}")
    if "principal_id" in envelope:
        parts += (',"principal_id":', json_string(envelope["principal_id"]))
    parts += (',"record_type":"', DECISION_RECORD, '","recorded_at":')
    head = "".join(parts)
    parts = []
    if "repo" in envelope:
        parts += (',"repo":', json_string(envelope["repo"]))
    route = envelope.get("route")
    if route is not None:
        members = [f'"{k}":{json_string(route[k])}' for k in sorted(route)]
        parts += (',"route":{', ",".join(members), "}")
    parts += (f',"schema_version":{SCHEMA_VERSION},"seam":', json_string(seam), "}")
    try:
        return RecordTemplate(head.encode("utf-8"), "".join(parts).encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: the plain encoder's fallback decides
        return None


def _envelope(
    record: dict[str, Any],
    decision: RouteDecision,
    principal_id: str | None,
    repo: str,
    answer: str,
    provider: str,
    account_id: str | None,
    model: str | None,
    implied: tuple[Any, Any],
) -> None:
    """Add to ``record`` the principal, repository and route members the decision does not
    already imply (``implied``: the answer's implied account and model)."""
    context = decision.explanation.context
    if principal_id != context.principal_id:
        record["principal_id"] = principal_id
    if context.repo is None or repo != context.repo.value:
        record["repo"] = repo
    if answer not in _REFUSED:
        route: dict[str, Any] = {}
        if provider != _DEFAULT_PROVIDER:
            route["provider"] = provider
        if account_id != implied[0]:
            route["account_id"] = account_id
        if model != implied[1]:
            route["model"] = model
        if route:
            record["route"] = route


def _lineage(
    record: dict[str, Any], decision: RouteDecision, revision: int, policy_hash: str
) -> None:
    """Add the lineage members that differ from the decision's own revision and hash."""
    lineage: dict[str, Any] = {}
    if revision != decision.policy_revision:
        lineage["revision"] = revision
    if policy_hash != decision.snapshot_hash:
        lineage["policy_hash"] = policy_hash
    if lineage:
        record["lineage"] = lineage


def _implied_of(answer: str, decision: RouteDecision) -> tuple[Any, Any]:
    """:func:`_implied_route` of the decision object itself (no dict of it built)."""
    legacy = decision.explanation.context.legacy_route
    legacy_account = None if legacy is None else legacy.account_id
    legacy_model = None if legacy is None else legacy.model
    if answer == ENFORCED_ANSWER:
        return decision.account_id, decision.effective_model or legacy_model
    return legacy_account, legacy_model


def _implied_route(answer: Any, decision: Any) -> tuple[Any, Any]:
    """``(account, model)`` an answer implies from its stored decision: the decision's route
    for ``enforced`` (its model, else the legacy route's), the legacy route for the rest."""
    explanation = decision.get("explanation") if isinstance(decision, dict) else None
    context = explanation.get("context") if isinstance(explanation, dict) else None
    legacy = context.get("legacy_route") if isinstance(context, dict) else None
    legacy = legacy if isinstance(legacy, dict) else {}
    if answer == ENFORCED_ANSWER and isinstance(decision, dict):
        return decision.get("account_id"), decision.get("effective_model") or legacy.get("model")
    return legacy.get("account_id"), legacy.get("model")


def enforced_view(payload: Any) -> Any:
    """An enforced decision record's payload with every member the envelope left out put back
    (:func:`decision_record`): ``enforced``, ``transport``, ``principal_id``, ``repo``, the
    route (``null`` for a refusal) with its ``provider``, ``account_id`` and ``model``, and the
    lineage's ``revision`` and ``policy_hash``. A record that stores them (written before they
    were left out) is returned with its own values; anything that is not an enforced decision
    record is returned as given."""
    if not isinstance(payload, dict) or payload.get("record_type") != DECISION_RECORD:
        return payload
    decision = payload.get("decision")
    if not isinstance(decision, dict):
        return payload
    explanation = decision.get("explanation")
    context = explanation.get("context") if isinstance(explanation, dict) else None
    context = context if isinstance(context, dict) else {}
    repo = context.get("repo")
    out = dict(payload)
    out.setdefault("enforced", True)
    out.setdefault("transport", GOVERNED_TRANSPORT)
    out.setdefault("principal_id", context.get("principal_id"))
    if "repo" not in out:
        out["repo"] = repo.get("value") if isinstance(repo, dict) else repo
    route = out.get("route", None if out.get("answer") in _REFUSED else {})
    if isinstance(route, dict):
        implied = _implied_route(out.get("answer"), decision)
        route = {
            "provider": _DEFAULT_PROVIDER,
            "account_id": implied[0],
            "model": implied[1],
            **route,
        }
    out["route"] = route
    lineage = out.get("lineage")
    out["lineage"] = {
        "revision": decision.get("policy_revision"),
        "policy_hash": decision.get("snapshot_hash"),
        **(lineage if isinstance(lineage, dict) else {}),
    }
    return out


def lineage_of(payload: Any) -> Any:
    """An enforced decision record's whole lineage: the pinned revision and its hash
    (:func:`enforced_view`) with its decision's policy id and decision id (stored once, in the
    decision); a lineage that names them is returned as stored."""
    if isinstance(payload, dict) and payload.get("record_type") == DECISION_RECORD:
        payload = enforced_view(payload)
    lineage = payload.get("lineage") if isinstance(payload, dict) else None
    decision = payload.get("decision") if isinstance(payload, dict) else None
    if not isinstance(lineage, dict) or not isinstance(decision, dict) or "decision_id" in lineage:
        return lineage
    return {
        "policy_id": decision.get("policy_id"),
        "decision_id": decision.get("decision_id"),
        **lineage,
    }


def _head(
    record_type: str, recorded_at: str, actor: str, repo: str, revision: int
) -> dict[str, Any]:
    """The members an arm, a disarm and a gate record open with, in their order."""
    return {
        "record_type": record_type,
        "schema_version": SCHEMA_VERSION,
        "recorded_at": recorded_at,
        "actor": actor,
        "repo": repo,
        "transport": GOVERNED_TRANSPORT,
        "revision": revision,
    }


def gate_record(
    *,
    recorded_at: str,
    actor: str,
    repo: str,
    revision: int,
    policy_hash: str,
    bar: GateBar,
    since: str,
    figures: GateFigures,
    verdict: GateVerdict,
    chain_size: int,
) -> dict[str, Any]:
    """One gate verdict with its figures, bar, window and revision: the evidence an arm cites."""
    return {
        **_head(GATE_RECORD, recorded_at, actor, repo, revision),
        "policy_hash": policy_hash,
        "bar": bar.to_dict(),
        "window": {"since": since, "until": recorded_at, "seconds": bar.window_s},
        "figures": figures.to_dict(),
        "verdict": verdict.verdict,
        "failed": list(verdict.failed),
        "chain_size": chain_size,
    }


def arm_record(
    *,
    recorded_at: str,
    actor: str,
    repo: str,
    revision: int,
    policy_hash: str,
    gate_seq: int,
    verdict: str,
    override_reason: str | None,
    trip_rate: float | None,
    trip_window_s: int | None,
    prior_revision: int | None,
) -> dict[str, Any]:
    """One arm (or re-arm, moving the pin from ``prior_revision``): the revision pinned, the
    gate verdict it rests on (its seq), and for an override, who and why."""
    return {
        **_head(ARM_RECORD, recorded_at, actor, repo, revision),
        "policy_hash": policy_hash,
        "gate_seq": gate_seq,
        "verdict": verdict,
        "override": override_reason is not None,
        "reason": override_reason,
        "trip_rate": trip_rate,
        "trip_window_s": trip_window_s,
        "prior_revision": prior_revision,
    }


def disarm_record(
    *, recorded_at: str, actor: str, repo: str, revision: int, arm_seq: int
) -> dict[str, Any]:
    """One disarm by an operator: the canary and the pin it enforced until now."""
    return {
        **_head(DISARM_RECORD, recorded_at, actor, repo, revision),
        "arm_seq": arm_seq,
    }


def trip_record(
    *,
    recorded_at: str,
    repo: str,
    reason: str,
    revision: int,
    armed_by: str,
    arm_seq: int,
    decision_seq: int,
    decisions: int,
    refusals: int,
    trip_rate: float | None,
    trip_window_s: int | None,
    detail: str | None = None,
) -> dict[str, Any]:
    """One trip: the canary disarmed itself (``reason``), at the decision ``decision_seq``, with
    the window's counts and the rule that fired."""
    return {
        "record_type": TRIP_RECORD,
        "schema_version": SCHEMA_VERSION,
        "recorded_at": recorded_at,
        "actor": TRIP_ACTOR,
        "armed_by": armed_by,
        "repo": repo,
        "transport": GOVERNED_TRANSPORT,
        "reason": reason,
        "detail": detail,
        "revision": revision,
        "arm_seq": arm_seq,
        "decision_seq": decision_seq,
        "decisions": decisions,
        "refusals": refusals,
        "trip_rate": trip_rate,
        "trip_window_s": trip_window_s,
    }
