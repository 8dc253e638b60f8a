"""The console's overview over real HTTP: a cached snapshot that is no longer fresh is said to be
so once (the state in front of the `Ruleset snapshot:` line, not again inside it), with the
command that renews it for this kind of home; doctor's table is dated (when, and how long ago)
and doctor runs again on a quiet chain after a bounded time."""

from __future__ import annotations

import datetime as dt
import html
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.cli._clock import OFFSET_ENV
from rensei_routing.console.state import DOCTOR_RERUN_S, Doctor

from .console_support import fetch, running_ui
from .shadow_support import home_with_policies, installed_seams

__all__ = ["installed_seams"]

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


def _text(body: bytes, ident: str) -> str:
    """The text of the element with id ``ident`` (tags dropped, entities decoded)."""
    m = re.search(rf'id="{ident}"[^>]*>(.*?)</(span|p|dd)>'.encode(), body, re.S)
    assert m is not None, (ident, body[:2000])
    return html.unescape(re.sub(rb"<[^>]+>", b"", m.group(1)).decode())


def _later(seconds: int) -> dict[str, str]:
    """The tests' environment with the console's clock shifted ``seconds`` ahead."""
    return {**os.environ, OFFSET_ENV: str(seconds)}


def _ok(runner: CliRunner, *args: str) -> None:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, (args, result.output)


@pytest.mark.usefixtures("installed_seams")
def test_a_degraded_quickstart_snapshot_is_said_once_with_how_to_renew_it(
    tmp_path: Path,
) -> None:
    qs = tmp_path / "qs"
    _ok(CliRunner(), "quickstart", "--home", str(qs))
    with running_ui(qs, tmp_path / "ui.log", env=_later(600)) as base:  # past DegradedAfter
        status, body = fetch(base + "/")
        assert status == 200
        assert _text(body, "snapshot-state") == "degraded"
        line = _text(body, "snapshot-line")
        assert line.startswith("quickstart@1 (age ") and "degraded" not in line
        # said once (the home's path, which names this test, aside, and doctor's own table:
        # when its background run ends before this fetch, its host-cache check reports the
        # same state in its own words)
        summary = re.sub(rb'<table[^>]*id="doctor".*?</table>', b"", body, flags=re.S)
        assert summary.replace(str(qs).encode(), b"").count(b"degraded") == 1
        renew = _text(body, "snapshot-renew")
        assert f"rensei quickstart --home {qs}" in renew and "again" in renew


def test_a_file_synced_home_names_host_sync(tmp_path: Path) -> None:
    home = tmp_path / "c1"
    runner = CliRunner()
    export = tmp_path / "c1s1.json"
    _ok(runner, "init", "--org", "acme", "--home", str(home))
    _ok(runner, "org", "load", str(EXAMPLES / "org.json"), "--home", str(home))
    _ok(runner, "policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home))
    _ok(runner, "snapshot", "compile", "--home", str(home))
    _ok(runner, "snapshot", "export", str(export), "--home", str(home))
    _ok(runner, "host", "trust", "--from-home", str(home), "--home", str(home))
    _ok(runner, "host", "sync", "--from", str(export), "--home", str(home))
    with running_ui(home, tmp_path / "ui.log", env=_later(3600)) as base:  # past RefuseAfter
        body = fetch(base + "/")[1]
        assert _text(body, "snapshot-state") == "expired"
        line = _text(body, "snapshot-line")
        assert "expired" not in line and "refusing to decide from it" in line
        renew = _text(body, "snapshot-renew")
        assert f"rensei host sync --home {home}" in renew and str(export) in renew
        assert "quickstart" not in renew
    with running_ui(home, tmp_path / "ui2.log") as base:  # fresh: nothing to renew
        body = fetch(base + "/")[1]
        assert _text(body, "snapshot-state") == "fresh"
        assert b'id="snapshot-renew"' not in body


def test_doctor_is_dated_and_runs_again_on_a_quiet_chain(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    moment = [dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC)]
    doctor = Doctor(home, lambda: moment[0])
    doctor.step()
    first = doctor.at
    assert first == moment[0] and doctor.checks
    moment[0] += dt.timedelta(seconds=DOCTOR_RERUN_S - 1)
    doctor.step()
    assert doctor.at == first  # nothing changed, not due yet
    moment[0] += dt.timedelta(seconds=2)
    doctor.step()
    assert doctor.at == moment[0]  # due: run again though the chain did not move
    with running_ui(home.path, tmp_path / "ui.log") as base:
        body = b""
        for _ in range(100):
            body = fetch(base + "/")[1]
            if b'id="doctor-at"' in body:
                break
        dated = _text(body, "doctor-at")
        assert re.match(r"Checked at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, \S+ ago; ", dated)
        assert dated.endswith("at least every 5 min.")
