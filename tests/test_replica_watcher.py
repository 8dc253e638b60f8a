"""The replica watcher's polling fallback (issue 23): with no notification at all, a write by
another connection still reaches the serving replica within its watch interval, on both
backends (SQLite announces nothing; on PostgreSQL the listener is switched off by a store whose
``wait_change`` only waits)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rensei_routing.control.replicas import ReplicaWatcher
from rensei_routing.control.server import SnapshotService
from rensei_routing.control.snapshots import Signer
from rensei_routing.store.backends import open_control_store
from rensei_routing.store.control import ControlStore
from rensei_routing.store.postgres import PgControlStore

from .control_backends import BACKENDS, T, control_home, policies


class _Deaf(PgControlStore):
    """The PostgreSQL store with its notifications ignored: the watcher can only poll."""

    def wait_change(self, timeout: float) -> bool:
        time.sleep(timeout)
        return False


@pytest.mark.parametrize("backend", BACKENDS)
def test_with_no_notification_polling_delivers_the_write(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue("pg_url")) if backend == "postgresql" else None
    ctl = control_home(tmp_path / "home", backend, url)
    writer = ctl.open()
    writer.save_policies(policies("a"), saved_at=T)

    def open_store() -> ControlStore:
        if url is None:
            return open_control_store(ctl.home, write=True)
        return _Deaf.connect(url, org_id="acme", key_id=ctl.home.public_key().key_id)

    service = SnapshotService(
        latest=lambda: None,
        compile_now=lambda: (_ for _ in ()).throw(AssertionError("the watcher compiles")),
        needs_refresh=lambda held: False,
        refresh=lambda held: None,
    )
    watcher = ReplicaWatcher(
        service,
        open_store=open_store,
        signer=Signer.of(ctl.home),
        clock=lambda: datetime.now(UTC),
        reseal_after=timedelta(hours=1),
        poll_s=0.2,
    )
    watcher.start()
    try:
        assert watcher.first_step.wait(30)
        held = service.held()
        assert held is not None and held.revision == 1
        writer.save_policies(policies("a", "b"), saved_at=T)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            now = service.held()
            if now is not None and now.revision == 2:
                break
            time.sleep(0.02)
        now = service.held()
        assert now is not None and now.revision == 2
        assert service.store_error is None
    finally:
        watcher.stop()
        writer.close()
