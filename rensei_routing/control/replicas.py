"""Several ``rensei serve`` replicas on one control database: the watcher that keeps one
replica's :class:`~rensei_routing.control.server.SnapshotService` in step with it, and
:func:`replica_service`, the endpoint's service and watcher for such a home.

Off the request path, in one thread, the watcher repeats one step: compile the data when it
changed (under the org's compile lock, so one replica compiles each change), re-seal when the
latest snapshot is older than ``reseal_after`` (under the same lock: once per period, whichever
replica), and hand the service whatever is newer than what it serves (published by any replica
or CLI). Between steps it waits for a notification (PostgreSQL LISTEN/NOTIFY: a write by anyone
wakes every replica at once) or ``poll_s`` seconds, the polling fallback when a notification is
lost or the listening connection is down.

Fail-static: when the database cannot be reached, the step fails, the service keeps serving the
snapshot it holds (whole, verified, as it was) flagged ``X-Ruleset-Store: unreachable``, and the
watcher retries every ``poll_s``; its first good step clears the flag. A replica that holds no
snapshot (the database was down when it started) answers 503 meanwhile, and its log says so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Final

from ..core.audit.chain import format_timestamp
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.snapshot.envelope import RulesetSnapshot
from ..core.snapshot.validators import SnapshotValidator
from ..errors import RenseiRoutingError, StoreError
from ..store.backends import open_control_store
from ..store.control import ControlStore
from ..store.home import Home
from .server import SnapshotService
from .snapshots import (
    DEFAULT_RESEAL_AFTER_S,
    Signer,
    control_store,
    latest_snapshot,
    newer_in,
    refresh_in,
)

__all__ = ["ReplicaWatcher", "replica_service"]

log = logging.getLogger("rensei_routing.replica")

#: Seconds between retries while the database is unreachable (at most; ``poll_s`` if shorter).
RETRY_S: Final = 1.0


class ReplicaWatcher:
    """Keeps ``service`` in step with the store ``open_store`` opens (see the module)."""

    def __init__(
        self,
        service: SnapshotService,
        *,
        open_store: Callable[[], ControlStore],
        signer: Signer,
        clock: Callable[[], datetime],
        reseal_after: timedelta,
        validators: Sequence[SnapshotValidator] = (),
        poll_s: float = 1.0,
    ) -> None:
        self._service = service
        self._open = open_store
        self._signer = signer
        self._clock = clock
        self._reseal_after = reseal_after
        self._validators = tuple(validators)
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store: ControlStore | None = None
        #: Set after the first step, good or not (serve waits for it before listening).
        self.first_step = threading.Event()

    def step(self) -> None:
        """One refresh + adopt. Raises: RenseiRoutingError (the store is unusable)."""
        if self._store is None:
            self._store = self._open()
        store = self._store
        held = self._service.held()
        fresh = refresh_in(
            store,
            held,
            self._signer,
            now=self._clock(),
            reseal_after=self._reseal_after,
            validators=self._validators,
        )
        if fresh is not None:
            self._service.offer(fresh)
        published = newer_in(store, self._service.held(), lookup=self._signer.lookup)
        if published is not None:
            self._service.offer(published)

    def _unreachable(self) -> str:
        """What the replica does while the store cannot be reached: serve the snapshot it
        holds (flagged), or, holding none (the database was down at start), answer 503."""
        held = self._service.held()
        if held is None:
            return (
                "control store unreachable, holding no snapshot: answering 503 until it is reached"
            )
        return f"control store unreachable, serving the held snapshot {held.ruleset_rev}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
                self._service.store_failed("watch", None)
                self._service.last_error = None
            except StoreError as e:
                self._service.store_failed("watch", str(e))
                log.warning("%s: %s", self._unreachable(), e)
                self.first_step.set()
                self._stop.wait(min(self._poll_s, RETRY_S))
                continue
            except RenseiRoutingError as e:  # a failing validator, a snapshot that moved
                self._service.last_error = str(e)
                log.warning("recompile failed, serving the held snapshot: %s", e)
            self.first_step.set()
            self._wait()
        if self._store is not None:
            self._store.close()

    def _wait(self) -> None:
        if self._stop.is_set():
            return
        store = self._store
        if store is None:
            self._stop.wait(self._poll_s)
            return
        try:
            store.wait_change(self._poll_s)
        except StoreError as e:  # the listening connection broke: look again soon
            self._service.store_failed("watch", str(e))
            log.warning("%s: %s", self._unreachable(), e)
            self._stop.wait(min(self._poll_s, RETRY_S))

    def start(self) -> None:
        """Start the watcher thread (a daemon: it never holds the process up)."""
        self._thread = threading.Thread(target=self._run, name="replica-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current wait (at most ``poll_s``) and close the store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def replica_service(
    home: Home,
    *,
    clock: Callable[[], datetime],
    validators: Sequence[SnapshotValidator] = (),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    reseal_after: float = DEFAULT_RESEAL_AFTER_S,
    poll_s: float = 1.0,
) -> tuple[SnapshotService, ReplicaWatcher]:
    """The endpoint's view of ``home`` when its control data is shared by several replicas
    (a PostgreSQL ``[store] url``): the service answers from memory, and the
    :class:`~rensei_routing.control.replicas.ReplicaWatcher` (started by the caller) compiles,
    re-seals and adopts off the request path; while the database is unreachable the held
    snapshot keeps serving, flagged."""
    signer = Signer.of(home)

    def first() -> RulesetSnapshot | None:
        return latest_snapshot(home)

    def compile_once() -> RulesetSnapshot:
        """The org's first snapshot on a request: compiled under the compile lock only when
        no replica (nor this one's watcher, racing it after the database came back) built one
        from the current data meanwhile, else the one that did."""
        with control_store(home, write=True, vocabulary=vocabulary) as store:
            result = store.compile_current(
                compiled_at=format_timestamp(clock()),
                signing_key_id=signer.key_id,
                sign=signer.sign,
                validators=validators,
                only_if_stale=True,
            )
            return (
                result.snapshot if result is not None else store.load_snapshot(lookup=signer.lookup)
            )

    service = SnapshotService(
        latest=first,
        compile_now=compile_once,
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
        clock=clock,
    )
    watcher = ReplicaWatcher(
        service,
        open_store=lambda: open_control_store(home, write=True, vocabulary=vocabulary),
        signer=signer,
        clock=clock,
        reseal_after=timedelta(seconds=reseal_after),
        validators=validators,
        poll_s=poll_s,
    )
    return service, watcher
