"""Shadow records: the route a spawn's legacy mechanisms actually took, beside what policy would
have chosen (document 001 §D6, §D7; SEMANTICS.md "Shadow records").

Pure: frozen values and the classification rules. No I/O, no clock (``recorded_at`` is an
argument), no plugin manager: a seam's own classifier is a plain callable handed in by the
adapter that owns the plugins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _e
from typing import Any, Final

from ...errors import InputError
from .. import _parse as p
from ..canonical import canonical_bytes
from ..canonical import json_string as _s
from ..routing.decision import SELECTED, RouteDecision
from ..routing.ids import ScanMemo
from ..routing.members import LegacyRoute
from ..routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = [
    "DIVERGENCES",
    "RECORD_KEYS",
    "SHADOW_RECORD_TYPE",
    "UNCLASSIFIED",
    "ActualRoute",
    "Classifier",
    "Seam",
    "ShadowDecision",
    "Stage",
    "classify_legacy_mechanism",
    "compare",
    "is_shadow_payload",
    "provider_binding_for",
    "record_may_redact",
    "shadow_decision",
    "stored_actual",
    "transport_for",
]

#: ``record_type`` of a shadow record's payload in the audit log (a plain ``explain --record``
#: payload is a bare decision and has no ``record_type``).
SHADOW_RECORD_TYPE: Final = "shadow-decision"
SHADOW_SCHEMA_VERSION: Final = 1
#: The mechanism of a route whose seam classifier failed (its detail names the plugin).
UNCLASSIFIED: Final = "unclassified"

# Divergence kinds (SEMANTICS.md "Shadow records"); ``agreed`` iff ``none``.
NONE: Final = "none"
PROVIDER: Final = "provider"
MODEL: Final = "model"
PROVIDER_AND_MODEL: Final = "provider-and-model"
NOT_SELECTED: Final = "not-selected"
DIVERGENCES: Final = (NONE, PROVIDER, MODEL, PROVIDER_AND_MODEL, NOT_SELECTED)

# Transports.
GATEWAY: Final = "gateway"
HARNESS_DIRECT: Final = "harness-direct"
DIRECT_HTTP: Final = "direct-http"

#: Legacy provider names that mean a direct, OpenAI-compatible HTTP call at a one-shot seam
#: (at an agentic seam the same name is a harness pointed at another endpoint).
DIRECT_HTTP_PROVIDERS: Final = frozenset({"zai", "kimi", "openrouter"})
#: Legacy provider names served through the z.ai harness binding.
HARNESS_PROVIDERS: Final = frozenset({"zai", "kimi", "openrouter", "zai-harness"})

_MAX_NAME: Final = 64
_MAX_DETAIL: Final = 1024


def _lane(provider: str) -> str:
    return provider.strip().lower()


def _as_set(names: Iterable[str]) -> frozenset[str]:
    return names if isinstance(names, frozenset) else frozenset(names)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """One legacy routing stage a seam applied, and the provider it left the spawn on."""

    mechanism: str
    provider: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "provider": self.provider, "detail": self.detail}

    @classmethod
    def from_dict(
        cls, data: Any, *, path: p.Path = "", vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> Stage:
        """Raises: MalformedError."""
        d = p.obj(data, path, required=("mechanism", "provider"), optional=("detail",))
        return cls(
            mechanism=p.choice(
                d["mechanism"],
                p.at(path, "mechanism"),
                vocabulary.legacy_mechanisms,
                what="legacy mechanism",
            ),
            provider=p.string(d["provider"], p.at(path, "provider"), max_len=_MAX_NAME),
            detail=p.string(
                d.get("detail", ""), p.at(path, "detail"), max_len=_MAX_DETAIL, min_len=0
            ),
        )


def classify_legacy_mechanism(stages: Sequence[Stage]) -> Stage:
    """The stage that decided the route: from the last stage back, the first whose provider
    differs from the stage before it; when none moved it, the first stage (the dial the spawn
    started on). Providers compare stripped and lowercased.

    Raises:
        InputError: ``stages`` is empty (a legacy route names at least one stage).
    """
    if not stages:
        raise InputError("a legacy route must name at least one stage")
    lanes = [_lane(s.provider) for s in stages]
    for i in range(len(stages) - 1, 0, -1):
        if lanes[i] != lanes[i - 1]:
            return stages[i]
    return stages[0]


def transport_for(
    provider: str, face: str, *, direct_http_providers: Iterable[str] = DIRECT_HTTP_PROVIDERS
) -> str:
    """How a spawn reaches its upstream, derived from the request face, not the provider name:
    ``gateway`` -> gateway; a one-shot face with a direct-HTTP provider -> direct-http (bypass
    traffic no gateway policy can bind); anything else -> harness-direct."""
    lane = _lane(provider)
    if lane == GATEWAY:
        return GATEWAY
    if face == "one-shot" and lane in _as_set(direct_http_providers):
        return DIRECT_HTTP
    return HARNESS_DIRECT


def provider_binding_for(
    provider: str, model: str | None, *, harness_providers: Iterable[str] = HARNESS_PROVIDERS
) -> str:
    """The account binding a legacy provider name lands on: the gateway binds by model (a
    ``glm`` id goes to z.ai), a harness provider to ``zai-harness``, anything else to
    ``anthropic``."""
    lane = _lane(provider)
    if lane == GATEWAY:
        return "zai-harness" if (model or "").strip().lower().startswith("glm") else "anthropic"
    return "zai-harness" if lane in _as_set(harness_providers) else "anthropic"


#: A seam's legacy-mechanism classifier: the applied stages -> the stage that decided the route.
Classifier = Callable[[Sequence[Stage]], Stage]


@dataclass(frozen=True, slots=True, kw_only=True)
class Seam:
    """A spawn site: its name, the request face its spawns carry, the ordered names of the
    legacy stages it applies (mechanisms), and the classifier that names the deciding stage.

    ``direct_http_providers`` are the legacy provider names that mean a direct HTTP call at this
    seam when its face is one-shot (see :func:`transport_for`).
    """

    name: str
    request_face: str
    stages: tuple[str, ...]
    classifier: Classifier = field(default=classify_legacy_mechanism)
    direct_http_providers: frozenset[str] = DIRECT_HTTP_PROVIDERS
    description: str = ""

    def transport(self, provider: str) -> str:
        """The transport of a spawn at this seam that ended on ``provider``."""
        return transport_for(
            provider, self.request_face, direct_http_providers=self.direct_http_providers
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ActualRoute:
    """The route that actually ran: the legacy provider name as the seam saw it, the binding,
    account and model it landed on, the deciding mechanism, and the transport."""

    provider: str
    provider_binding: str
    account_id: str | None = None
    model: str | None = None
    mechanism: str
    mechanism_detail: str | None = None
    transport: str

    def legacy_route(self) -> LegacyRoute:
        """The resolver's view of this route (a context's ``legacy_route``). An
        ``unclassified`` mechanism is no mechanism of the vocabulary, so the context names none
        (the detail still says why); the record's ``actual`` keeps it."""
        return LegacyRoute(
            provider_binding=self.provider_binding,
            account_id=self.account_id,
            model=self.model,
            mechanism=None if self.mechanism == UNCLASSIFIED else self.mechanism,
            mechanism_detail=self.mechanism_detail,
        )

    def canonical_json(self) -> str:
        """RFC 8785 text of :meth:`to_dict`, written directly (tested equal to the encoder)."""
        return (
            f'{{"account_id":{_s(self.account_id)},"mechanism":{_e(self.mechanism)},'
            f'"mechanism_detail":{_s(self.mechanism_detail)},"model":{_s(self.model)},'
            f'"provider":{_e(self.provider)},"provider_binding":{_e(self.provider_binding)},'
            f'"transport":{_e(self.transport)}}}'
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "provider_binding": self.provider_binding,
            "account_id": self.account_id,
            "model": self.model,
            "mechanism": self.mechanism,
            "mechanism_detail": self.mechanism_detail,
            "transport": self.transport,
        }

    @classmethod
    def from_dict(
        cls, data: Any, *, path: p.Path = "", vocabulary: Vocabulary = DEFAULT_VOCABULARY
    ) -> ActualRoute:
        """Raises: MalformedError."""
        d = p.obj(
            data,
            path,
            required=("provider", "provider_binding", "mechanism", "transport"),
            optional=("account_id", "model", "mechanism_detail"),
        )
        return cls(
            provider=p.string(
                d["provider"], p.at(path, "provider"), max_len=_MAX_NAME, verbatim=True
            ),
            provider_binding=p.string(
                d["provider_binding"],
                p.at(path, "provider_binding"),
                max_len=_MAX_NAME,
                verbatim=True,
            ),
            account_id=p.opt_string(
                d.get("account_id"), p.at(path, "account_id"), max_len=256, verbatim=True
            ),
            model=p.opt_string(d.get("model"), p.at(path, "model"), max_len=256, verbatim=True),
            mechanism=p.choice(
                d["mechanism"],
                p.at(path, "mechanism"),
                vocabulary.legacy_mechanisms | {UNCLASSIFIED},
                what="legacy mechanism",
            ),
            mechanism_detail=p.opt_string(
                d.get("mechanism_detail"),
                p.at(path, "mechanism_detail"),
                max_len=_MAX_DETAIL,
                min_len=0,
            ),
            transport=p.choice(
                d["transport"], p.at(path, "transport"), vocabulary.transports, what="transport"
            ),
        )


def compare(decision: RouteDecision, actual: ActualRoute) -> str:
    """How the proposed route differs from the one that ran: ``not-selected`` unless the
    decision selected; else whether the provider binding and/or the model moved (a decision
    with no model of its own keeps the one that ran; models compare stripped, lowercased)."""
    if decision.outcome != SELECTED:
        return NOT_SELECTED
    provider_moved = (decision.provider_binding or "") != actual.provider_binding
    ran = (actual.model or "").strip().lower()
    proposed = (decision.effective_model or actual.model or "").strip().lower()
    model_moved = proposed != ran
    if provider_moved and model_moved:
        return PROVIDER_AND_MODEL
    if provider_moved:
        return PROVIDER
    if model_moved:
        return MODEL
    return NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowDecision:
    """One spawn's proposed route recorded beside its actual route: one audit record each."""

    recorded_at: str
    seam: str
    principal_id: str | None
    actual: ActualRoute
    proposed: RouteDecision
    agreed: bool
    divergence: str

    def _brief_actual(self) -> bool:
        """Whether ``actual`` is stored as its provider and transport only: the rest is the
        proposed decision's ``legacy_route`` (see :func:`stored_actual`)."""
        legacy = self.proposed.explanation.context.legacy_route
        return legacy is not None and self.actual == ActualRoute(
            provider=self.actual.provider,
            transport=self.actual.transport,
            **_from_legacy(legacy),
        )

    def to_dict(self) -> dict[str, Any]:
        """The record. ``actual`` keeps only what the proposed decision's context does not
        hold (its provider and transport) when the rest is that context's legacy route, and
        a null ``principal_id`` is left out; readers put both back (:func:`stored_actual`)."""
        actual = self.actual.to_dict()
        out = {
            "record_type": SHADOW_RECORD_TYPE,
            "schema_version": SHADOW_SCHEMA_VERSION,
            "recorded_at": self.recorded_at,
            "seam": self.seam,
            "actual": {k: actual[k] for k in _BRIEF_ACTUAL} if self._brief_actual() else actual,
            "proposed": self.proposed.to_dict(),
            "agreed": self.agreed,
            "divergence": self.divergence,
        }
        if self.principal_id is not None:
            out["principal_id"] = self.principal_id
        return out

    def stored_may_redact(self, scan: ScanMemo) -> bool:
        """Whether the redactor behind ``scan`` might change this record (any string value, or
        a key of :data:`RECORD_KEYS`); ``False``: its stored form is :meth:`canonical` (see
        :func:`rensei_routing.core.audit.chain.encode_payloads`)."""
        return scan.may_redact((_KEYS_TEXT,)) or record_may_redact(scan, self)

    def canonical(self) -> bytes:
        """RFC 8785 bytes of :meth:`to_dict`, written directly around the proposed decision's
        own canonical bytes (what the audit log stores; tested equal to the encoder)."""
        try:
            actual = self.actual
            principal = self.principal_id
            head = (
                (
                    f'{{"actual":{{"provider":{_e(actual.provider)},'
                    f'"transport":{_e(actual.transport)}}},'
                    if self._brief_actual()
                    else f'{{"actual":{actual.canonical_json()},'
                )
                + f'"agreed":{"true" if self.agreed else "false"},'
                f'"divergence":{_e(self.divergence)},'
                + ("" if principal is None else f'"principal_id":{_e(principal)},')
                + '"proposed":'
            ).encode()
            tail = (
                f',"record_type":{_e(SHADOW_RECORD_TYPE)},"recorded_at":{_e(self.recorded_at)},'
                f'"schema_version":{SHADOW_SCHEMA_VERSION},"seam":{_e(self.seam)}}}'
            ).encode()
        except UnicodeEncodeError:  # a lone surrogate: the encoder names the problem
            return canonical_bytes(self.to_dict())
        return head + self.proposed.canonical() + tail

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        redacted: bool = False,
    ) -> ShadowDecision:
        """Read a shadow record back; ``agreed`` and ``divergence`` must be the ones the
        record's own proposed and actual routes give. A record read from the audit log is
        read with ``redacted=True`` (its proposed decision's context may hold redaction
        markers, see :meth:`RouteDecision.from_dict`).

        Raises:
            MalformedError: naming the offending field.
        """
        d = p.obj(
            data,
            path,
            required=_REQUIRED,
            optional=_OPTIONAL,
        )
        if d["record_type"] != SHADOW_RECORD_TYPE:
            raise p.fail(p.at(path, "record_type"), f"expected {SHADOW_RECORD_TYPE!r}")
        p.integer(  # a record from a newer schema is refused, not misread
            d.get("schema_version", SHADOW_SCHEMA_VERSION),
            p.at(path, "schema_version"),
            lo=1,
            hi=SHADOW_SCHEMA_VERSION,
        )
        proposed = RouteDecision.from_dict(
            d["proposed"], path=p.at(path, "proposed"), redacted=redacted
        )
        actual = ActualRoute.from_dict(
            stored_actual(d), path=p.at(path, "actual"), vocabulary=vocabulary
        )
        divergence = p.choice(
            d["divergence"], p.at(path, "divergence"), DIVERGENCES, what="divergence"
        )
        if divergence != compare(proposed, actual):
            raise p.fail(
                p.at(path, "divergence"),
                f"{divergence!r} is not what the record's routes give "
                f"({compare(proposed, actual)!r})",
            )
        agreed = p.boolean(d["agreed"], p.at(path, "agreed"))
        if agreed != (divergence == NONE):
            raise p.fail(
                p.at(path, "agreed"), "agreed must be true exactly when divergence is none"
            )
        return cls(
            recorded_at=p.string(d["recorded_at"], p.at(path, "recorded_at"), max_len=64),
            seam=p.string(d["seam"], p.at(path, "seam"), max_len=_MAX_NAME, verbatim=True),
            principal_id=p.opt_string(
                d.get("principal_id"), p.at(path, "principal_id"), max_len=256, verbatim=True
            ),
            actual=actual,
            proposed=proposed,
            agreed=agreed,
            divergence=divergence,
        )


_BRIEF_ACTUAL: Final = ("provider", "transport")


def _from_legacy(legacy: LegacyRoute) -> dict[str, Any]:
    """The members of an actual route that its context's legacy route holds."""
    return {
        "provider_binding": legacy.provider_binding,
        "account_id": legacy.account_id,
        "model": legacy.model,
        "mechanism": UNCLASSIFIED if legacy.mechanism is None else legacy.mechanism,
        "mechanism_detail": legacy.mechanism_detail,
    }


def stored_actual(payload: Any) -> Any:
    """A stored shadow record's ``actual`` route as :meth:`ActualRoute.to_dict` gives it: one
    stored as its provider and transport only (no ``provider_binding``) gets the rest from
    its proposed decision's ``legacy_route`` (an absent member there is null; no mechanism is
    ``unclassified``). Anything else is returned as stored (a reader refuses what is wrong)."""
    actual = payload.get("actual") if isinstance(payload, dict) else None
    if not isinstance(actual, dict) or "provider_binding" in actual:
        return actual
    proposed = payload.get("proposed")
    explanation = proposed.get("explanation") if isinstance(proposed, dict) else None
    context = explanation.get("context") if isinstance(explanation, dict) else None
    legacy = context.get("legacy_route") if isinstance(context, dict) else None
    if not isinstance(legacy, dict):
        return actual
    mechanism = legacy.get("mechanism")
    return {
        "provider_binding": legacy.get("provider_binding"),
        "account_id": legacy.get("account_id"),
        "model": legacy.get("model"),
        "mechanism": UNCLASSIFIED if mechanism is None else mechanism,
        "mechanism_detail": legacy.get("mechanism_detail"),
        **actual,
    }


def shadow_decision(
    *,
    recorded_at: str,
    seam: str,
    principal_id: str | None,
    actual: ActualRoute,
    proposed: RouteDecision,
) -> ShadowDecision:
    """Compare ``proposed`` with ``actual`` and build the record."""
    divergence = compare(proposed, actual)
    return ShadowDecision(
        recorded_at=recorded_at,
        seam=seam,
        principal_id=principal_id,
        actual=actual,
        proposed=proposed,
        agreed=divergence == NONE,
        divergence=divergence,
    )


def is_shadow_payload(payload: Any) -> bool:
    """Whether an audit payload is a shadow record (else a bare recorded decision)."""
    return isinstance(payload, dict) and payload.get("record_type") == SHADOW_RECORD_TYPE


_REQUIRED: Final = (
    "record_type",
    "recorded_at",
    "seam",
    "actual",
    "proposed",
    "agreed",
    "divergence",
)
_OPTIONAL: Final = ("schema_version", "principal_id")
#: Every object key a shadow record adds to those of a decision record (its own and its actual
#: route's): a redactor whose pre-check might match one scans every record whole.
RECORD_KEYS: Final = (*_REQUIRED, *_OPTIONAL, "provider", "transport")
_KEYS_TEXT: Final = " ".join(RECORD_KEYS)


def record_may_redact(scan: ScanMemo, record: ShadowDecision) -> bool:
    """Whether the redactor behind ``scan`` might change any string value of ``record`` (when
    not, and not its keys either, its stored form is its canonical bytes as they are)."""
    actual = record.actual
    return scan.record_may_redact(record.proposed, None) or scan.may_redact(
        (
            record.recorded_at,
            record.seam,
            record.principal_id,
            record.divergence,
            actual.provider,
            actual.provider_binding,
            actual.account_id,
            actual.model,
            actual.mechanism,
            actual.mechanism_detail,
            actual.transport,
            SHADOW_RECORD_TYPE,
        )
    )
