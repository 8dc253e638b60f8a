"""The budget posture's per-project local cap, counted in SQLite so every process on the host
shares one bound (document 000, "Budget: conservative-cap").

Adapter: owns the ``local_caps`` table. The verdict is the core's (``core.postures``); this
module only makes "check the cap, then count the launch" one atomic step.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from ..core.snapshot.postures import BudgetResult, budget_verdict, local_cap_verdict
from ..errors import StoreError

__all__ = ["LocalCaps"]


class LocalCaps:
    """Per-project inflight counts over one writer connection."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn

    def inflight(self, project: str) -> int:
        """Raises: StoreError."""
        try:
            value = self._conn.execute(
                "SELECT inflight FROM local_caps WHERE project = ?", (project,)
            ).get
        except apsw.Error as e:
            raise StoreError(f"cannot read local caps: {e}") from e
        return int(value) if isinstance(value, int) else 0

    def admit(
        self,
        project: str,
        *,
        read_counter: Callable[[], int],
        limit: int,
        read_live_signal: Callable[[], bool],
        local_cap: int,
    ) -> BudgetResult:
        """Decide one launch; when the local cap admits it, count it in the same transaction
        (so N processes racing for a cap of K admit exactly K). The counter and the signal are
        read before the transaction: a slow read never holds the write lock.

        Raises:
            StoreError: the cap could not be read or counted (the launch is not admitted).
        """
        verdict = budget_verdict(
            read_counter=read_counter, limit=limit, read_live_signal=read_live_signal
        )
        if verdict is not None:
            return verdict
        try:
            with self._conn:
                result = local_cap_verdict(self.inflight(project), local_cap)
                if result.admitted:
                    self._conn.execute(
                        "INSERT INTO local_caps(project, inflight) VALUES (?, 1) "
                        "ON CONFLICT(project) DO UPDATE SET inflight = inflight + 1",
                        (project,),
                    )
        except apsw.Error as e:
            raise StoreError(f"cannot count the local cap: {e}") from e
        return result

    def release(self, project: str) -> None:
        """A launch admitted under the local cap finished.

        Raises:
            StoreError: the count could not be written.
        """
        try:
            with self._conn:
                self._conn.execute(
                    "UPDATE local_caps SET inflight = max(inflight - 1, 0) WHERE project = ?",
                    (project,),
                )
        except apsw.Error as e:
            raise StoreError(f"cannot release the local cap: {e}") from e
