"""``rensei explain-batch --record`` appends its spooled records as this log's own encoding
(``append_encoded(own=True)``): the automatic checkpoint after the batch takes the batch at the
head the process wrote instead of parsing every record again, and still signs exactly the
chain that verifies. A payload appended without ``own`` is walked as before. Real homes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.store.audit import AuditLog, autocheckpoint
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
POLICIES = EXAMPLES / "policies.json"
T = "2025-03-01T12:00:00.000000Z"


def _walked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int | None]]:
    """The stretches the automatic checkpoint walks (parsing every record), as (lo, hi)."""
    seen: list[tuple[int, int | None]] = []
    real = autocheckpoint._stretch

    def stretch(conn, lo, hi, prev):  # type: ignore[no-untyped-def]
        seen.append((lo, hi))
        return real(conn, lo, hi, prev)

    monkeypatch.setattr(autocheckpoint, "_stretch", stretch)
    return seen


def _rows_walked(home: Home, seen: list[tuple[int, int | None]]) -> int:
    with AuditLog.open(home) as log:
        end = log.count()
    return sum((end if hi is None else hi) - lo for lo, hi in seen)


def test_a_recorded_batch_is_checkpointed_without_parsing_it_again(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Home(tmp_path / "h")
    at = ["--home", str(home.path)]
    assert runner.invoke(cli, ["init", *at]).exit_code == 0
    home.config_path.write_text("[audit]\ncheckpoint_every = 5\n")
    assert runner.invoke(cli, ["policy", "save", str(POLICIES), *at]).exit_code == 0
    lines = (EXAMPLES / "contexts.jsonl").read_text().splitlines()
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(lines * 3) + "\n")
    with AuditLog.open(home) as log:
        before = log.count()  # the policy save's record, appended by another log
    seen = _walked(monkeypatch)
    result = runner.invoke(cli, ["explain-batch", str(path), "--record", *at])
    assert result.exit_code == 0, result.output
    with AuditLog.open(home) as log:
        assert log.count() - before == 3 * len(lines) >= 5
        assert log.auto_checkpoint_error is None
        verified = log.verify()
    assert verified.ok and verified.checkpoints_checked == 1
    assert _rows_walked(home, seen) == before  # the batch itself was the process's own


@pytest.mark.parametrize("own", [True, False])
def test_append_encoded_spares_only_what_the_caller_owns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own: bool
) -> None:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text("[audit]\ncheckpoint_every = 10\n")
    seen = _walked(monkeypatch)
    with AuditLog.open(home) as log:
        payloads = [encode_payload({"i": i}, log._redactor) for i in range(12)]
        log.append_encoded(iter(payloads), recorded_at=T, own=own)
        assert log.auto_checkpoint_error is None
        verified = log.verify()
    assert verified.ok and verified.checkpoints_checked == 1
    assert _rows_walked(home, seen) == (0 if own else 12)
