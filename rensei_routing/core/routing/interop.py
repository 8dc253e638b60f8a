"""HydraFlow's policy store (``policies.json``) read as policies: its document shape and its
order-independent content hash (SEMANTICS.md, "Reference wire formats"). Pure: the caller reads
the file and saves the result through the normal validated save.

The document (indent 2, keys sorted): ``{content_hash, policies, revision, schema_version}``.
``content_hash`` = ``sha256:`` + hex SHA-256 of the policies' JSON texts (each policy object
exactly as the file holds it, keys sorted, compact separators, ``json.dumps``'s ASCII escapes),
**sorted** and joined with ``"\\n"``: the same set in any order hashes alike. That is not our
:func:`~.policy.hash_policies` (RFC 8785 of the normalised policies), so the two hashes of one
set differ; both are reported. A file that does not parse, has a field of the wrong type, or
whose hash does not match is ``corrupt`` and yields no policy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ...errors import InputError, PolicyStoreCorruptError
from .. import _parse as p
from ..canonical import SHA256_PREFIX
from .policy import RoutingPolicy
from .vocabulary import DEFAULT_VOCABULARY, Vocabulary

__all__ = ["HF_POLICY_KEYS", "HydraflowPolicies", "hydraflow_content_hash", "read_hydraflow"]

HF_POLICY_KEYS: Final = ("content_hash", "policies", "revision", "schema_version")
HF_POLICY_SCHEMA: Final = 1


def hydraflow_content_hash(policies: Sequence[Any]) -> str:
    """HydraFlow's content hash of policy objects (as the file holds them)."""
    texts = sorted(
        json.dumps(pol, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        for pol in policies
    )
    return SHA256_PREFIX + hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class HydraflowPolicies:
    """A verified HydraFlow store: its policies (ours), its revision and content hash."""

    policies: tuple[RoutingPolicy, ...]
    revision: int
    content_hash: str


def _corrupt(source: str, why: str) -> PolicyStoreCorruptError:
    return PolicyStoreCorruptError(f"{source}: corrupt HydraFlow policy store: {why}")


def read_hydraflow(
    text: str, *, source: str = "policies.json", vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> HydraflowPolicies:
    """Read and check a HydraFlow ``policies.json``.

    Raises:
        PolicyStoreCorruptError: unparseable, a wrong type, an unknown ``schema_version``, a
            content hash mismatch, or a policy that cannot be one of ours (the field named).
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise _corrupt(source, f"not JSON ({e})") from None
    if not isinstance(doc, dict) or set(doc) != set(HF_POLICY_KEYS):
        raise _corrupt(source, f"expected an object with exactly {', '.join(HF_POLICY_KEYS)}")
    policies, content_hash = doc["policies"], doc["content_hash"]
    revision, schema = doc["revision"], doc["schema_version"]
    if not isinstance(policies, list) or not all(isinstance(x, dict) for x in policies):
        raise _corrupt(source, "policies is not an array of objects")
    if type(content_hash) is not str:
        raise _corrupt(source, "content_hash is not a string")
    if type(revision) is not int or revision < 0:
        raise _corrupt(source, "revision is not a non-negative integer")
    if schema != HF_POLICY_SCHEMA or type(schema) is not int:
        raise _corrupt(source, f"schema_version {schema!r} is not {HF_POLICY_SCHEMA}")
    actual = hydraflow_content_hash(policies)
    if actual != content_hash:
        raise _corrupt(source, f"content_hash {content_hash} does not match its policies: {actual}")
    try:
        ours = tuple(
            RoutingPolicy.from_dict(pol, path=p.at("policies", i), vocabulary=vocabulary)
            for i, pol in enumerate(policies)
        )
    except InputError as e:
        raise _corrupt(source, f"not a policy: {e}") from e
    return HydraflowPolicies(policies=ours, revision=revision, content_hash=content_hash)
