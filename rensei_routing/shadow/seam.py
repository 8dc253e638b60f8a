"""What the two services at a spawn seam (the shadow recorder, the Enforcer) hold alike over one
home: the seam registry that turns a spawn into the context to explain and the route that ran,
the vocabulary, the redactor and the clock of their records, and the reader connection and the
audit log each opens on first use and closes. Holds no rule and decides nothing; not for several
threads at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Self

import apsw

from ..core.redact import Redactor
from ..core.routing.context import RouteContext
from ..core.routing.vocabulary import Vocabulary
from ..core.shadow.compare import ActualRoute
from ..core.shadow.spawn import Spawn, spawn_route
from ..plugins.manager import SeamRegistry, safe_classify
from ..store.audit import AuditLog
from ..store.db import close_quietly
from ..store.home import Home

__all__ = ["SeamService"]


class SeamService:
    """The base of a service at a spawn seam: the subclass's constructor takes the arguments
    (its own signature, with their defaults) and hands them here; nothing is opened yet."""

    __slots__ = ("_clock", "_conn", "_home", "_log", "_redactor", "_registry", "_vocabulary")

    def __init__(
        self,
        home: Home,
        registry: SeamRegistry,
        vocabulary: Vocabulary,
        redactor: Redactor,
        clock: Callable[[], str],
    ) -> None:
        self._home = home
        self._registry = registry
        self._vocabulary = vocabulary
        self._redactor = redactor
        self._clock = clock
        self._conn: apsw.Connection | None = None
        self._log: AuditLog | None = None

    def route(self, spawn: Spawn) -> tuple[RouteContext, ActualRoute]:
        """The context to explain and the route that ran (the seam's classifier names the
        deciding stage; see :func:`..core.shadow.spawn.spawn_route`).

        Raises:
            UnknownSeamError: the spawn's seam is not registered.
        """
        seam = self._registry.get(spawn.seam)
        stages = spawn.resolved_stages(seam)
        return spawn_route(spawn, seam, safe_classify(self._registry, seam.name, stages))

    # -- resources ----------------------------------------------------------------------------

    def _reader(self) -> apsw.Connection:
        if self._conn is None:
            self._conn = self._home.connect()
        return self._conn

    def _audit(self) -> AuditLog:
        if self._log is None:
            self._log = AuditLog.open(self._home, redactor=self._redactor)
        return self._log

    def close(self) -> None:
        """Close the audit log and the reader connection (idempotent; they reopen on use)."""
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._conn is not None:
            close_quietly(self._conn)
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
