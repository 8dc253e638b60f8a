"""What the console keeps in memory between requests: the chain's verification, doctor's
checks and what-if comparisons, each computed by a background thread and shown with the time
it was made. Nothing is written anywhere: a restart starts them again.

A page never waits for a verification (one over a million records takes seconds): until the
first one finishes the chain shows as "not verified yet", never as fine; a finished one says
how many records it covered, so records appended since show as not yet verified, and the
thread verifies again whenever the chain's head moves.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ..core.audit.chain import VerifyResult
from ..core.routing.policy import PolicySnapshot
from ..core.routing.vocabulary import Vocabulary
from ..core.shadow.whatif import WhatIfSummary
from ..errors import RenseiRoutingError
from ..host.cache import host_cache
from ..ops.doctor import Check, home_checks, host_cache_check
from ..shadow.whatif import compare_chain
from ..store.audit import AuditLog
from ..store.home import Home

__all__ = ["Doctor", "Verified", "Verifier", "WhatIfJob", "WhatIfJobs"]

#: Seconds between looks at the chain's head (a moved head is verified again).
POLL_S: Final = 2.0
#: Seconds between doctor runs while the head keeps moving.
DOCTOR_EVERY_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class Verified:
    """One finished verification: its result (or the error that stopped it) and when."""

    result: VerifyResult | None
    error: str | None
    at: datetime
    head: tuple[int, str]


def _head(home: Home) -> tuple[int, str]:
    with closing(AuditLog.open(home)) as log:
        return log.head()


class _Watch(abc.ABC):
    """A daemon thread calling ``step`` now and then until :meth:`stop`."""

    def __init__(self, name: str, every_s: float) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._every = every_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._wake.wait(self._every)
            self._wake.clear()

    @abc.abstractmethod
    def step(self) -> None:
        """One round of the watch's work (each subclass's own)."""

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()


class Verifier(_Watch):
    """The chain's verification against every stored checkpoint, redone when the head moves."""

    def __init__(self, home: Home, clock: Callable[[], datetime]) -> None:
        super().__init__("verify", POLL_S)
        self._home = home
        self._clock = clock
        self.last: Verified | None = None
        self.running_since: datetime | None = None

    def step(self) -> None:
        try:
            head = _head(self._home)
        except RenseiRoutingError as e:
            self.last = Verified(None, str(e), self._clock(), (0, ""))
            return
        if self.last is not None and self.last.head == head:
            return
        self.running_since = self._clock()
        try:
            with closing(AuditLog.open(self._home)) as log:
                result = log.verify()
            self.last = Verified(result, None, self._clock(), head)
        except RenseiRoutingError as e:
            self.last = Verified(None, str(e), self._clock(), head)
        finally:
            self.running_since = None


class Doctor(_Watch):
    """``rensei doctor``'s home and host-cache checks, rerun when the head moved (at most once
    a minute)."""

    def __init__(self, home: Home, clock: Callable[[], datetime]) -> None:
        super().__init__("doctor", DOCTOR_EVERY_S)
        self._home = home
        self._clock = clock
        self.checks: list[Check] | None = None
        self.at: datetime | None = None
        self._seen: tuple[int, str] | None = None

    def step(self) -> None:
        try:
            head: tuple[int, str] | None = _head(self._home)
        except RenseiRoutingError:
            head = None
        if self.checks is not None and head == self._seen:
            return
        moment = self._clock()
        checks = home_checks(self._home, now=moment)
        checks.append(host_cache_check(host_cache(Path(self._home.path)), now=moment))
        self.checks, self.at, self._seen = checks, moment, head


@dataclass(slots=True)
class WhatIfJob:
    """One comparison of the chain against a candidate: running, done or failed."""

    label: str
    started: datetime
    done: datetime | None = None
    summary: WhatIfSummary | None = None
    error: str | None = None
    skipped: int = 0
    current_revision: int = 0


class WhatIfJobs:
    """What-if comparisons by candidate and chain head, one thread each (cached until the head
    moves; the page shows progress until a job is done)."""

    def __init__(self, home: Home, clock: Callable[[], datetime], vocabulary: Vocabulary) -> None:
        self._home = home
        self._clock = clock
        self._vocabulary = vocabulary
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, tuple[int, str]], WhatIfJob] = {}

    def get(
        self,
        label: str,
        current: Callable[[], tuple[PolicySnapshot, str]],
        candidate: Callable[[], PolicySnapshot],
    ) -> WhatIfJob:
        """The job for ``label`` at the current head, started if new."""
        key = (label, _head(self._home))
        with self._lock:
            job = self._jobs.get(key)
            if job is not None:
                return job
            job = self._jobs[key] = WhatIfJob(label=label, started=self._clock())
            if len(self._jobs) > 32:
                self._jobs.pop(next(iter(self._jobs)))
        threading.Thread(
            target=self._run, args=(job, current, candidate), name="whatif", daemon=True
        ).start()
        return job

    def _run(
        self,
        job: WhatIfJob,
        current: Callable[[], tuple[PolicySnapshot, str]],
        candidate: Callable[[], PolicySnapshot],
    ) -> None:
        skipped: list[int] = []
        try:
            now_snapshot = current()
            job.current_revision = now_snapshot[0].revision
            with closing(AuditLog.open(self._home)) as log:
                job.summary = compare_chain(
                    log,
                    now_snapshot,
                    candidate(),
                    examples=5,
                    skipped=skipped.append,
                    vocabulary=self._vocabulary,
                )
        except RenseiRoutingError as e:
            job.error = str(e)
        job.skipped = len(skipped)
        job.done = self._clock()
