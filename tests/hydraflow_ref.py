"""An independent HydraFlow reference, written from SEMANTICS.md ("Reference wire formats")
alone: it imports nothing of rensei_routing, so a mistake in our interop code cannot hide in a
shared helper. It writes HydraFlow audit chains and policy stores the way HydraFlow does (the
policy store's fields and defaults as HydraFlow's own models have them: every field dumped, a
mapping's model spelled ``effective_model``), verifies a chain the way
``RoutingAuditLog.verify()`` does and loads a policy store the way its routing store does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

GENESIS = "sha256:" + "0" * 64


def canonical(value: Any) -> str:
    """HydraFlow's canonical JSON: sorted keys, compact, ASCII escapes, non-JSON as str()."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


#: A stand-in for HydraFlow's redactor: it knows GitHub tokens only (ours knows more).
_GH = re.compile(r"ghp_[A-Za-z0-9]{20,}")


def hydraflow_redact(text: str) -> str:
    return _GH.sub("[REDACTED]", text)


def chain_lines(
    payloads: Iterable[Any],
    stamps: Sequence[str] | None = None,
    *,
    redact: Callable[[str], str] = hydraflow_redact,
) -> list[str]:
    """The lines HydraFlow's append writes for ``payloads`` (each newline-terminated)."""
    lines, prev = [], GENESIS
    for seq, payload in enumerate(payloads):
        text = redact(canonical(payload))
        p_hash = sha(text)
        r_hash = sha(f"{seq}|{prev}|{p_hash}")
        stamp = (
            stamps[seq] if stamps else f"2026-08-22T10:{seq // 60 % 60:02d}:{seq % 60:02d}+00:00"
        )
        record = {
            "payload": json.loads(text),
            "payload_hash": p_hash,
            "prev_hash": prev,
            "record_hash": r_hash,
            "recorded_at": stamp,
            "schema_version": 1,
            "seq": seq,
        }
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
        prev = r_hash
    return lines


def write_chain(path: Path, lines: Iterable[str]) -> Path:
    path.write_text("".join(lines), encoding="utf-8")
    return path


def verify(lines: Iterable[str]) -> tuple[bool, int, int | None]:
    """``(ok, records verified, first bad seq)`` by HydraFlow's rule."""
    prev, count = GENESIS, 0
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            seq, payload = rec["seq"], rec["payload"]
            p_hash, prev_hash, r_hash = rec["payload_hash"], rec["prev_hash"], rec["record_hash"]
        except (ValueError, KeyError, TypeError):
            return False, count, count
        if (
            seq != count
            or prev_hash != prev
            or sha(canonical(payload)) != p_hash
            or sha(f"{seq}|{prev_hash}|{p_hash}") != r_hash
        ):
            return False, count, count
        prev, count = r_hash, count + 1
    return True, count, None


# -- the policy store ----------------------------------------------------------------------------
# HydraFlow keeps one revision of its policy set in ``policies.json`` (its routing store): the
# store's model dumped in JSON mode, ``json.dumps(..., indent=2, sort_keys=True)``, written as is
# (no trailing newline). Its models refuse unknown fields and fill every absent one with a
# default when loading, and a dump writes every field. Below: those fields and defaults, as read
# from HydraFlow's routing policy module (names and defaults only; no code of theirs).

#: A policy's own fields beside ``id`` (required), ``match`` and ``action``, with their defaults.
POLICY_DEFAULTS: dict[str, Any] = {"enabled": True, "priority": 0, "system_safety": False}
#: The match: six sets of exact values; empty means any.
MATCH_DEFAULTS: dict[str, Any] = {
    "repo_ids": [],
    "repo_classes": [],
    "roles": [],
    "principal_ids": [],
    "model_requirements": [],  # each {"kind": ..., "value": ...}
    "request_faces": [],
}
#: The action. A requirement mapping is {"requirement": {"kind", "value"}, "effective_model"}.
ACTION_DEFAULTS: dict[str, Any] = {
    "provider_lock": None,
    "account_pool": [],
    "requirement_map": [],
    "allowed_patterns": [],
    "forbid_direct_bypass": False,
    "selection": "ordered",
    "on_unavailable": "hold",
    "fallback_on": [],
}


def _only(fields: dict[str, Any], allowed: Iterable[str], where: str) -> None:
    extra = sorted(set(fields) - set(allowed))
    if extra:
        raise ValueError(f"{where}: HydraFlow's model has no field {extra[0]!r}")


def _requirement(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != {"kind", "value"}:
        raise ValueError(f"{where}: a requirement is an object of kind and value")
    return dict(value)


def dump_policy(policy: dict[str, Any]) -> dict[str, Any]:
    """What HydraFlow writes for a policy given with some of its fields: every field, the
    absent ones at their defaults. A field its model does not have is refused (ValueError)."""
    _only(policy, ["id", "match", "action", *POLICY_DEFAULTS], "policy")
    if not isinstance(policy.get("id"), str):
        raise ValueError("policy: id is required")
    match = dict(policy.get("match", {}))
    _only(match, MATCH_DEFAULTS, "match")
    match = {**MATCH_DEFAULTS, **match}
    match["model_requirements"] = [_requirement(r, "match") for r in match["model_requirements"]]
    action = dict(policy.get("action", {}))
    _only(action, ACTION_DEFAULTS, "action")
    action = {**ACTION_DEFAULTS, **action}
    mapped = []
    for entry in action["requirement_map"]:
        _only(entry, ["requirement", "effective_model"], "requirement_map")
        if not isinstance(entry.get("effective_model"), str):
            raise ValueError("requirement_map: effective_model is required")
        mapped.append(
            {
                "requirement": _requirement(entry.get("requirement"), "requirement_map"),
                "effective_model": entry["effective_model"],
            }
        )
    action["requirement_map"] = mapped
    return {**POLICY_DEFAULTS, **policy, "match": match, "action": action}


def policy_hash(dumped: Iterable[dict[str, Any]]) -> str:
    """HydraFlow's content hash: each dumped policy's sorted, compact JSON text, the texts
    sorted and joined by newlines (order-independent)."""
    texts = sorted(json.dumps(p, sort_keys=True, separators=(",", ":")) for p in dumped)
    return sha("\n".join(texts))


def policy_store(policies: list[dict[str, Any]], revision: int = 7) -> str:
    """HydraFlow's ``policies.json`` text for policies given in HydraFlow's spelling (each
    dumped with every field: what its store writes, byte for byte)."""
    dumped = [dump_policy(p) for p in policies]
    doc = {
        "content_hash": policy_hash(dumped),
        "policies": dumped,
        "revision": revision,
        "schema_version": 1,
    }
    return json.dumps(doc, indent=2, sort_keys=True)


def load_store(text: str) -> tuple[str, list[dict[str, Any]]]:
    """``(state, policies)`` as HydraFlow's store loads ``text``: ``ok`` with the dumped
    policies, or ``corrupt`` with none (unparseable, an unknown field, a hash mismatch)."""
    try:
        doc = json.loads(text)
        _only(doc, ["content_hash", "policies", "revision", "schema_version"], "store")
        dumped = [dump_policy(p) for p in doc.get("policies", [])]
    except (ValueError, TypeError, AttributeError):
        return "corrupt", []
    if doc.get("content_hash") != policy_hash(dumped):
        return "corrupt", []
    return "ok", dumped


#: A policy set in HydraFlow's spelling, as its operators would write it (the store fills in
#: the rest). It passes our validation too; its lists are in the order ours normalise to (a set
#: sorted, the pool as given), so our export of it is HydraFlow's text of it.
SAMPLE_POLICIES: list[dict[str, Any]] = [
    {
        "id": "safety-opus-stays-anthropic",
        "system_safety": True,
        "priority": 100,
        "match": {"model_requirements": [{"kind": "literal_family", "value": "claude-opus"}]},
        "action": {
            "provider_lock": "anthropic",
            "account_pool": ["anthropic-primary", "anthropic-backup"],
            "requirement_map": [
                {
                    "requirement": {"kind": "literal_family", "value": "claude-opus"},
                    "effective_model": "claude-opus-4-1",
                }
            ],
        },
    },
    {
        "id": "zai-pinned-loops",
        "priority": 10,
        "match": {"principal_ids": ["adr_reviewer", "pr_unstick", "wiki_compilation"]},
        "action": {
            "provider_lock": "zai-harness",
            "requirement_map": [
                {
                    "requirement": {"kind": "capability", "value": "balanced"},
                    "effective_model": "glm-4.6",
                },
                {
                    "requirement": {"kind": "capability", "value": "high-reasoning"},
                    "effective_model": "glm-5.3",
                },
            ],
            "allowed_patterns": ["glm-*"],
            "fallback_on": ["credit_exhausted", "rate_limited"],
        },
    },
    {
        "id": "client-repos-anthropic",
        "priority": 10,
        "match": {"repo_classes": ["client"], "request_faces": ["agentic"]},
        "action": {
            "provider_lock": "anthropic",
            "requirement_map": [
                {
                    "requirement": {"kind": "capability", "value": "high-reasoning"},
                    "effective_model": "claude-opus-4-1",
                }
            ],
            "forbid_direct_bypass": True,
            "on_unavailable": "reject",
        },
    },
    {
        "id": "acme-widgets-implementers",
        "enabled": False,
        "priority": 50,
        "match": {"repo_ids": ["acme/widgets"], "roles": ["implementer"]},
        "action": {"account_pool": ["anthropic-backup", "anthropic-primary"]},
    },
]
