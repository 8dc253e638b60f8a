"""A spawn as a seam reports it, and the routing question it becomes (document 001 §D7).

Pure: the :class:`Spawn` value (``from_dict`` / ``to_dict``), the requirement a spawn implies
when it names none, and :func:`spawn_route`, which turns a spawn, its seam and the stage that
seam's classifier named into the :class:`~rensei_routing.core.routing.context.RouteContext`
to explain and the :class:`~rensei_routing.core.shadow.compare.ActualRoute` that ran. No I/O, no
clock, no plugin manager: the adapter calls the classifier and hands its answer in.

A spawn line names its legacy route one of two ways: ``stages`` (every stage the seam applied,
in order, plus the final ``model`` and ``account_id``), or ``route`` (only the final route:
``provider``, ``model``, ``account_id`` and optionally the ``mechanism`` that decided it and its
``detail``; the mechanism defaults to the seam's first stage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .. import _parse as p
from ..routing.context import RouteContext
from ..routing.members import Account, ModelRequirement, RepoIdentity
from ..routing.vocabulary import (
    CAPABILITY,
    CONCRETE_MODEL,
    DEFAULT_VOCABULARY,
    LITERAL_FAMILY,
    Vocabulary,
)
from .compare import UNCLASSIFIED, ActualRoute, Seam, Stage, provider_binding_for, transport_for

__all__ = [
    "UNCLASSIFIED",
    "Spawn",
    "check_spawn",
    "requirement_for_model",
    "spawn_route",
]

#: Bare Claude CLI aliases that name a literal family (``opus`` -> ``claude-opus``).
_ALIAS_FAMILIES: Final = {"opus": "claude-opus", "sonnet": "claude-sonnet"}
_MAX_ID: Final = 256
_MAX_STAGES: Final = 32
_MAX_DETAIL: Final = 1024

_FIELDS: Final = (
    "seam",
    "principal_id",
    "repo",
    "repo_class",
    "role",
    "model_requirement",
    "face",
    "accounts",
    "stages",
    "model",
    "account_id",
    "route",
)
_ROUTE_FIELDS: Final = ("provider", "model", "account_id", "mechanism", "detail")


def requirement_for_model(model: str | None) -> ModelRequirement:
    """The requirement a spawn implies when it names none, from the model it ran with: a bare
    ``opus`` / ``sonnet`` alias is that literal family, no model is the ``balanced`` capability,
    anything else is that concrete id (as written)."""
    text = (model or "").strip()
    if not text:
        return ModelRequirement(kind=CAPABILITY, value="balanced")
    family = _ALIAS_FAMILIES.get(text.lower())
    if family is not None:
        return ModelRequirement(kind=LITERAL_FAMILY, value=family)
    return ModelRequirement(kind=CONCRETE_MODEL, value=text[:64])


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawn:
    """One spawn as its seam saw it: who, where, what it asked for, the accounts the host could
    use, and the legacy stages it went through (or only the route they ended on).

    A spawn given by its final route only (``route_only``) has one stage, whose mechanism is
    the one the route named, or empty for "the seam's first stage". Build one with
    :meth:`from_dict` (or with values it would accept): a record is only as readable as the
    spawn it was made from.
    """

    seam: str
    principal_id: str | None = None
    repo: RepoIdentity | None = None
    repo_class: str | None = None
    role: str | None = None
    model_requirement: ModelRequirement | None = None
    face: str | None = None
    accounts: tuple[Account, ...] = ()
    stages: tuple[Stage, ...] = ()
    model: str | None = None
    account_id: str | None = None
    route_only: bool = False

    @property
    def provider(self) -> str:
        """The legacy provider name the spawn ended on (the last stage's)."""
        return self.stages[-1].provider

    def to_dict(self) -> dict[str, Any]:
        """The document :meth:`from_dict` reads back to an equal value."""
        out: dict[str, Any] = {
            "seam": self.seam,
            "principal_id": self.principal_id,
            "repo": None if self.repo is None else self.repo.to_dict(),
            "repo_class": self.repo_class,
            "role": self.role,
            "model_requirement": None
            if self.model_requirement is None
            else self.model_requirement.to_dict(),
            "face": self.face,
            "accounts": [a.to_dict() for a in self.accounts],
        }
        if not self.route_only:
            out["stages"] = [s.to_dict() for s in self.stages]
            out["model"] = self.model
            out["account_id"] = self.account_id
            return out
        only = self.stages[0]
        out["route"] = {
            "provider": only.provider,
            "model": self.model,
            "account_id": self.account_id,
            "mechanism": only.mechanism or None,
            "detail": only.detail,
        }
        return out

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        path: p.Path = "",
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        default_seam: str | None = None,
    ) -> Spawn:
        """Read one spawn document; exactly one of ``stages`` and ``route`` names its route.

        ``default_seam`` is used when the document names no ``seam``; with neither, the
        document is refused.

        Raises:
            MalformedError: naming the offending field.
        """
        d: Mapping[str, Any] = p.obj(data, path, optional=_FIELDS)
        seam = d.get("seam")
        seam_name = (
            default_seam
            if seam is None
            else p.string(seam, p.at(path, "seam"), max_len=64, verbatim=True)
        )
        if seam_name is None:
            raise p.fail(p.at(path, "seam"), "required field is missing (or pass a default seam)")
        has_stages, has_route = "stages" in d, "route" in d
        if has_stages == has_route:
            raise p.fail(path, "give exactly one of 'stages' and 'route'")
        model: str | None
        account: str | None
        if has_stages:
            spath = p.at(path, "stages")
            items = p.array(d["stages"], spath)
            if not 1 <= len(items) <= _MAX_STAGES:
                raise p.fail(spath, f"expected 1..{_MAX_STAGES} stages, got {len(items)}")
            stages = tuple(
                Stage.from_dict(s, path=p.at(spath, i), vocabulary=vocabulary)
                for i, s in enumerate(items)
            )
            model = p.opt_string(d.get("model"), p.at(path, "model"), max_len=256, verbatim=True)
            account = p.opt_string(
                d.get("account_id"), p.at(path, "account_id"), max_len=_MAX_ID, verbatim=True
            )
        else:
            for key in ("model", "account_id"):
                if key in d:
                    raise p.fail(p.at(path, key), "with 'route', give it inside the route")
            rpath = p.at(path, "route")
            r = p.obj(d["route"], rpath, required=("provider",), optional=_ROUTE_FIELDS)
            provider = p.string(r["provider"], p.at(rpath, "provider"), max_len=64)
            model = p.opt_string(r.get("model"), p.at(rpath, "model"), max_len=256, verbatim=True)
            account = p.opt_string(
                r.get("account_id"), p.at(rpath, "account_id"), max_len=_MAX_ID, verbatim=True
            )
            mechanism = ""
            if r.get("mechanism") is not None:
                mechanism = p.choice(
                    r["mechanism"],
                    p.at(rpath, "mechanism"),
                    vocabulary.legacy_mechanisms,
                    what="legacy mechanism",
                )
            detail = p.string(r.get("detail") or "", p.at(rpath, "detail"), max_len=1024, min_len=0)
            stages = (Stage(mechanism=mechanism, provider=provider, detail=detail),)
        # The context half is read by the context's own parser: one definition of each field.
        ctx = RouteContext.from_dict(
            {
                k: d[k]
                for k in ("repo", "repo_class", "principal_id", "role", "model_requirement")
                if k in d
            }
            | {"accounts": d.get("accounts", [])},
            path=path,
            vocabulary=vocabulary,
        )
        face = d.get("face")
        return cls(
            seam=seam_name,
            principal_id=ctx.principal_id,
            repo=ctx.repo,
            repo_class=ctx.repo_class,
            role=ctx.role,
            model_requirement=ctx.model_requirement,
            face=None
            if face is None
            else p.choice(face, p.at(path, "face"), vocabulary.request_faces, what="request face"),
            accounts=ctx.accounts,
            stages=stages,
            model=model,
            account_id=account,
            route_only=has_route,
        )

    def resolved_stages(self, seam: Seam) -> tuple[Stage, ...]:
        """The stages to classify: as given, or for a route-only spawn its one stage under the
        mechanism it named (else the seam's first stage, else ``default``)."""
        only = self.stages[0]
        if not self.route_only or only.mechanism:
            return self.stages
        mechanism = seam.stages[0] if seam.stages else "default"
        return (Stage(mechanism=mechanism, provider=only.provider, detail=only.detail),)


def check_spawn(spawn: Spawn, seam: Seam, *, path: p.Path = "") -> None:
    """Refuse a spawn its seam could not have produced: a face that contradicts the seam's own
    (a seam whose face is ``unknown`` accepts any), or a stage the seam does not apply.

    Raises:
        MalformedError: naming the field.
    """
    if spawn.face not in (None, seam.request_face) and seam.request_face != "unknown":
        raise p.fail(
            p.at(path, "face"),
            f"{spawn.face!r} contradicts seam {seam.name!r} (face {seam.request_face!r})",
        )
    if seam.stages:
        known = frozenset(seam.stages)
        for i, stage in enumerate(spawn.resolved_stages(seam)):
            if stage.mechanism not in known:
                where = (
                    p.at(p.at(path, "route"), "mechanism")
                    if spawn.route_only
                    else p.at(p.at(path, "stages"), i)
                )
                raise p.fail(
                    where,
                    f"seam {seam.name!r} does not apply {stage.mechanism!r} "
                    f"(its stages: {', '.join(seam.stages)})",
                )


def spawn_route(spawn: Spawn, seam: Seam, deciding: Stage) -> tuple[RouteContext, ActualRoute]:
    """The context to explain and the route that ran, for a spawn at ``seam`` whose legacy route
    was decided by ``deciding`` (the seam classifier's answer).

    The context carries the spawn's principal, repo, class, role and accounts, the seam's face
    (or the spawn's own, at a seam whose face is ``unknown``), the requirement (given, else
    implied by the final model: :func:`requirement_for_model`) and, as its legacy route, the
    binding, account and model the spawn landed on with the deciding mechanism and its detail
    (``provider=<name>`` when the stage gave none).
    """
    stages = spawn.resolved_stages(seam)
    provider = stages[-1].provider
    face = spawn.face if seam.request_face == "unknown" and spawn.face else seam.request_face
    detail = deciding.detail.strip()[:_MAX_DETAIL] or f"provider={deciding.provider}"
    actual = ActualRoute(
        provider=provider,
        provider_binding=provider_binding_for(provider, spawn.model),
        account_id=spawn.account_id,
        model=spawn.model,
        mechanism=deciding.mechanism,
        mechanism_detail=detail,
        transport=transport_for(provider, face, direct_http_providers=seam.direct_http_providers),
    )
    context = RouteContext(
        repo=spawn.repo,
        repo_class=spawn.repo_class,
        principal_id=spawn.principal_id,
        role=spawn.role,
        model_requirement=spawn.model_requirement or requirement_for_model(spawn.model),
        request_face=face,
        legacy_route=actual.legacy_route(),
        accounts=spawn.accounts,
    )
    return context, actual
