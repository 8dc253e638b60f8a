"""``rensei doctor``: one line per check, ok / warn / fail, exit 0 unless something fails; each
finding provoked for real (modes, a tampered chain, a damaged file, an aged cache, a broken
plugin)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.plugins.manager import get_plugin_manager
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .plugins import sample
from .plugins.broken import RivalSeam

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
STAMP = "2026-01-01T00:00:00.000000Z"


def _home(tmp_path: Path, runner: CliRunner, *, checkpoint: bool = True) -> Home:
    home = Home(tmp_path / "home")
    assert runner.invoke(cli, ["init"]).exit_code == 0
    assert runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json")]).exit_code == 0
    with AuditLog.open(home) as log:
        log.append_many(({"n": i, "pad": "z" * 500} for i in range(2_000)), recorded_at=STAMP)
        if checkpoint:
            log.checkpoint()
    return home


def _doctor(runner: CliRunner, *args: str, **kw: object) -> tuple[int, dict[str, tuple[str, str]]]:
    done = runner.invoke(cli, ["doctor", "--json", *args], **kw)  # type: ignore[arg-type]
    assert "Traceback" not in done.output
    doc = json.loads(done.stdout)
    assert doc["ok"] == (done.exit_code == 0)
    return done.exit_code, {c["check"]: (c["status"], c["detail"]) for c in doc["checks"]}


def test_a_healthy_home(tmp_path: Path, runner: CliRunner) -> None:
    _home(tmp_path, runner)
    code, checks = _doctor(runner)
    assert code == 0
    assert set(checks) >= {
        "home", "keys", "integrity_check", "quick_check", "schema", "wal", "audit chain",
        "snapshot", "host cache", "plugins", "plugin hooks",
    }  # fmt: skip
    assert {s for s, _ in checks.values()} == {"ok"}
    assert checks["audit chain"][1] == "2,001 records, 1 checkpoint(s)"  # and the save's
    text = runner.invoke(cli, ["doctor"])
    assert text.exit_code == 0
    assert all(line.split()[0] in {"ok", "warn", "fail"} for line in text.stdout.splitlines())


def test_findings_that_warn(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner, checkpoint=False)
    os.chmod(home.path, 0o755)
    code, checks = _doctor(runner)
    assert code == 0
    assert checks["home"][0] == "warn" and "chmod 700" in checks["home"][1]
    assert checks["audit chain"][0] == "warn" and "no checkpoint" in checks["audit chain"][1]


@pytest.mark.parametrize("damage", ["key-mode", "tampered", "damaged-file"])
def test_findings_that_fail(tmp_path: Path, runner: CliRunner, damage: str) -> None:
    home = _home(tmp_path, runner)
    if damage == "key-mode":
        os.chmod(home.private_key_path, 0o644)
        name = "keys"
    elif damage == "tampered":
        conn = apsw.Connection(str(home.db_path))
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 7", (b'{"n":70}',))
        conn.close()
        name = "audit chain"
    else:
        size = home.db_path.stat().st_size
        with open(home.db_path, "r+b") as f:  # garble pages in the middle, keep the header
            f.seek(size // 2)
            f.write(os.urandom(8192))
        name = "integrity_check"
    code, checks = _doctor(runner)
    assert code == 1
    assert checks[name][0] == "fail", checks


def test_the_host_cache_ages(tmp_path: Path, runner: CliRunner) -> None:
    home = _home(tmp_path, runner)
    assert runner.invoke(cli, ["snapshot", "compile"]).exit_code == 0
    exported = tmp_path / "snap.json"
    assert runner.invoke(cli, ["snapshot", "export", str(exported)]).exit_code == 0
    assert runner.invoke(cli, ["host", "trust", str(home.public_key_path)]).exit_code == 0
    assert runner.invoke(cli, ["host", "sync", "--from", str(exported)]).exit_code == 0
    for offset, status in ((0, "ok"), (400, "warn"), (1900, "fail")):
        env = {"RENSEI_REHEARSAL_CLOCK_OFFSET_S": str(offset)}
        code, checks = _doctor(runner, env=env)
        assert checks["host cache"][0] == status, (offset, checks["host cache"])
        assert "local@1" in checks["host cache"][1]
        assert code == (1 if status == "fail" else 0)


def test_a_broken_plugin_is_named(tmp_path: Path, runner: CliRunner) -> None:
    _home(tmp_path, runner)
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(sample, name="sample")
    pm.register(RivalSeam(), name="rival")
    code, checks = _doctor(runner, obj=pm)
    assert code == 1
    status, detail = checks["plugin hooks"]
    assert status == "fail" and detail.startswith("seams: ") and "rival" in detail


def test_no_home(tmp_path: Path, runner: CliRunner) -> None:
    code, checks = _doctor(runner)
    assert code == 1 and checks["home"][0] == "fail" and "rensei init" in checks["home"][1]


def test_records_past_the_latest_strict_checkpoint_warn(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verify parses every record past the latest checkpoint made by this version; many of
    # them (or only older checkpoints) make verify slow, and doctor says what pins them.
    import rensei_routing.ops.doctor as doctor

    home = _home(tmp_path, runner)
    monkeypatch.setattr(doctor, "UNPINNED_WARN_RECORDS", 40)
    with AuditLog.open(home) as log:
        log.append_many(({"n": i} for i in range(40)), recorded_at=STAMP)
    code, checks = _doctor(runner)
    assert code == 0 and checks["audit chain"][0] == "ok"
    with AuditLog.open(home) as log:
        log.append_many(({"n": i} for i in range(1)), recorded_at=STAMP)
    code, checks = _doctor(runner)
    status, detail = checks["audit chain"]
    assert (code, status) == (0, "warn")
    assert "41 records past the latest checkpoint," in detail and "audit checkpoint" in detail


def test_checkpoints_from_before_the_strict_line_warn(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rensei_routing.store.audit.log as audit

    line = audit.STRICT_PAYLOADS
    monkeypatch.setattr(audit, "STRICT_PAYLOADS", "x-made-by: an earlier version")
    home = _home(tmp_path, runner)  # its checkpoint lacks the line
    code, checks = _doctor(runner)
    status, detail = checks["audit chain"]
    assert (code, status) == (0, "warn")
    assert "2,001 records past the latest checkpoint of this version" in detail
    monkeypatch.setattr(audit, "STRICT_PAYLOADS", line)  # (undo() would drop the home's env too)
    with AuditLog.open(home) as log:
        log.checkpoint()
    assert _doctor(runner)[1]["audit chain"][0] == "ok"
