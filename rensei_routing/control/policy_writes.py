"""Revision-safe policy writes as a service (the Python API of ``rensei policy save`` and
``rensei policy rollback``): the actor rule, then one audited write through the control store.
Holds no rule of its own (``core.routing.edits`` decides, ``store.policies.prepare_write``
checks in the write transaction) and never retries a refused write.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterable, Mapping

from ..core.redact import DEFAULT_REDACTOR, Redactor
from ..core.routing.edits import PolicyEdit, check_actor, scope_repo
from ..core.routing.policy import RoutingPolicy
from ..errors import InputError
from ..store.control import ControlStore, PolicyWrite

__all__ = ["ACTOR_ENV", "resolve_actor", "rollback_policies", "save_policies"]

#: The environment variable naming the actor when ``--actor`` does not.
ACTOR_ENV = "RENSEI_ACTOR"


def resolve_actor(
    actor: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> str:
    """Who is writing: ``actor``, else ``$RENSEI_ACTOR``, else the OS user; a label (1..128
    printable characters), never a credential. The same rule for every command that writes
    policy or enforcement state.

    Raises:
        InputError: no actor can be named, or the one named is not a usable label.
        CredentialValueError: it is shaped like a credential.
    """
    env = os.environ if environ is None else environ
    name = actor if actor is not None else env.get(ACTOR_ENV) or None
    if name is None:
        try:
            name = getpass.getuser()
        except (OSError, KeyError) as e:  # no login name and no passwd entry
            raise InputError(f"no actor: pass --actor NAME or set {ACTOR_ENV}") from e
    return check_actor(name, redactor)


def save_policies(
    store: ControlStore,
    policies: Iterable[RoutingPolicy],
    *,
    saved_at: str,
    actor: str | None = None,
    expected_revision: int | None = None,
    scope: str | None = None,
    over_corrupt: bool = False,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> PolicyWrite:
    """Save ``policies`` as the next revision, with its mutation record, in one transaction.
    With ``expected_revision``, refused unless that revision is still current; with
    ``scope`` (``owner/name``), only that repository's slice may change.

    Raises:
        StaleRevisionError, OutOfScopeError, CredentialValueError, CorruptSnapshotError,
        PolicyValidationError, RevisionLimitError, InputError, StoreError: nothing written.
    """
    edit = PolicyEdit(
        actor=resolve_actor(actor, redactor=redactor),
        policies=tuple(policies),
        expected_revision=expected_revision,
        scope=None if scope is None else scope_repo(scope),
        redactor=redactor,
    )
    return store.write_policies(edit, saved_at=saved_at, over_corrupt=over_corrupt)


def rollback_policies(
    store: ControlStore,
    *,
    to: int,
    saved_at: str,
    actor: str | None = None,
    expected_revision: int | None = None,
    scope: str | None = None,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> PolicyWrite:
    """Save revision ``to``'s set (0: no policy) as the next revision: history is never
    rewritten. What it brings back is checked like a save (credential shapes, validation);
    with ``scope``, only that repository's slice is brought back.

    Raises:
        RollbackTargetError (``no-such-revision``, ``target-corrupt``), and what
        :func:`save_policies` raises: nothing written.
    """
    if to < 0:
        raise InputError(f"--to must be a revision number (0 or more), not {to}")
    edit = PolicyEdit(
        actor=resolve_actor(actor, redactor=redactor),
        rollback_to=to,
        expected_revision=expected_revision,
        scope=None if scope is None else scope_repo(scope),
        redactor=redactor,
    )
    return store.write_policies(edit, saved_at=saved_at)
