"""The recorder encodes its records with the log's own redactor, as ``append`` would, and says
so (``append_stamped(..., own=True)``): the automatic checkpoint signs past them without
parsing them again, and the checkpoint it signs still verifies; bytes appended through
``append_stamped`` without ``own`` are walked and parsed as before."""

from __future__ import annotations

from pathlib import Path

from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog

from .shadow_support import home_with_policies, registry, spawn

STAMP = "2026-02-01T00:00:00.000000Z"


def _spawns(n: int) -> list[Spawn]:
    return [Spawn.from_dict(spawn(principal_id=f"implementer-{i}")) for i in range(n)]


def test_recorded_batches_are_vouched_and_the_checkpoint_verifies(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    home.config_path.write_text("[audit]\ncheckpoint_every = 10\n")
    with ShadowRecorder(home, registry(), clock=lambda: STAMP) as rec:
        rec.record_many(_spawns(6))
        rec.record(_spawns(1)[0])
        log = rec._audit()
        assert [v[:2] for v in log._vouched] == [(0, 5), (6, 6)]
        rec.record_many(_spawns(5))  # past 10: a checkpoint of the head (12 records)
        assert log.auto_checkpoint_error is None
    with AuditLog.open(home) as log:
        checkpoints = log.checkpoints()
        assert [c.size for c in checkpoints] == [12]
        result = log.verify()
        assert result.ok, result


def test_stamped_bytes_not_vouched_are_walked(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    home.config_path.write_text("[audit]\ncheckpoint_every = 1000\n")
    with AuditLog.open(home) as log:
        log.append_stamped(lambda conn, seq, head: [(STAMP, b'{"a":1}')])
        assert log._vouched == []
        log.append_stamped(lambda conn, seq, head: [(STAMP, b'{"a":2}')], own=True)
        assert [v[:2] for v in log._vouched] == [(1, 1)]
        assert log.count() == 2  # a builder returning a list is read once
