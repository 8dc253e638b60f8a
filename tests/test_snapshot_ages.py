"""When a cached snapshot degrades and is refused: the bounds are set with ``host sync
--degraded-after/--refuse-after`` (remembered in ``<home>/host/config.json``), the refusal names
the command that renews the snapshot, and the docs say when, with the defaults the code has."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.cli._clock import OFFSET_ENV
from rensei_routing.host.cache import HostConfig

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "rensei_routing" / "examples"


def _ok(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _host(tmp_path: Path, runner: CliRunner, *sync: str) -> tuple[Path, Path]:
    ctl = tmp_path / "control"
    _ok(runner, "--home", str(ctl), "init", "--org", "acme")
    _ok(runner, "--home", str(ctl), "org", "load", str(EXAMPLES / "org.json"))
    _ok(runner, "--home", str(ctl), "policy", "save", str(EXAMPLES / "policies.json"))
    _ok(runner, "--home", str(ctl), "snapshot", "compile")
    exported = tmp_path / "snapshot.json"
    _ok(runner, "--home", str(ctl), "snapshot", "export", str(exported))
    host = tmp_path / "host"
    _ok(runner, "--home", str(host), "host", "trust", str(ctl / "keys" / "host.pub"))
    _ok(runner, "--home", str(host), "host", "sync", "--from", str(exported), *sync)
    return host, exported


def _explain_at(runner: CliRunner, host: Path, offset_s: float) -> tuple[int, str, str]:
    result = runner.invoke(
        cli,
        ["--home", str(host), "explain", "--snapshot", str(EXAMPLES / "context.json"), "--json"],
        env={OFFSET_ENV: str(offset_s)},
    )
    return result.exit_code, result.stdout, result.stderr


def test_past_refuse_after_the_refusal_names_the_command_that_renews_it(
    tmp_path: Path, runner: CliRunner
) -> None:
    host, _ = _host(tmp_path, runner)
    config = json.loads((host / "host" / "config.json").read_text())
    assert (config["degraded_after_s"], config["refuse_after_s"]) == (300.0, 1800.0)
    code, out, _ = _explain_at(runner, host, 301)
    assert code == 0 and json.loads(out)["degraded"] is True
    code, out, err = _explain_at(runner, host, 1801)
    assert code == 1 and out == ""
    assert "past RefuseAfter (30m00s)" in err and "renew it with `rensei host sync`" in err
    assert len([line for line in err.splitlines() if line.startswith("Error:")]) == 1


def test_the_bounds_are_set_by_host_sync_and_remembered(tmp_path: Path, runner: CliRunner) -> None:
    host, exported = _host(
        tmp_path, runner, "--degraded-after", "86400", "--refuse-after", "172800"
    )
    code, out, _ = _explain_at(runner, host, 3600)
    assert code == 0 and json.loads(out)["degraded"] is False
    _ok(runner, "--home", str(host), "host", "sync", "--from", str(exported))  # kept
    config = json.loads((host / "host" / "config.json").read_text())
    assert (config["degraded_after_s"], config["refuse_after_s"]) == (86400.0, 172800.0)
    code, out, _ = _explain_at(runner, host, 90000)
    assert code == 0 and json.loads(out)["degraded"] is True
    assert _explain_at(runner, host, 172801)[0] == 1


def test_refuse_after_below_degraded_after_is_refused_and_nothing_saved(
    tmp_path: Path, runner: CliRunner
) -> None:
    host, exported = _host(tmp_path, runner)
    before = (host / "host" / "config.json").read_bytes()
    args = ["--from", str(exported), "--degraded-after", "100", "--refuse-after", "50"]
    result = runner.invoke(cli, ["--home", str(host), "host", "sync", *args])
    assert result.exit_code == 1
    assert "RefuseAfter" in result.stderr and "shorter than DegradedAfter" in result.stderr
    assert (host / "host" / "config.json").read_bytes() == before


def test_the_docs_say_when_with_the_defaults_of_the_code() -> None:
    defaults = HostConfig()
    snapshots = " ".join((ROOT / "docs" / "snapshots.md").read_text().split())
    operations = " ".join((ROOT / "docs" / "operations.md").read_text().split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`degraded_after_s` (default {defaults.degraded_after_s:.0f}" in snapshots
    assert f"`refuse_after_s` (default {defaults.refuse_after_s:.0f}" in snapshots
    assert "--degraded-after SECONDS --refuse-after SECONDS" in snapshots
    air_gap = operations.split("## Air-gapped install", 1)[1].split("## ", 1)[0]
    assert "`refuse_after_s` 1800" in air_gap and "`degraded_after_s` 300" in air_gap
    assert "refused 30 minutes after" in air_gap and "rensei host sync" in air_gap
    quickstart = readme.split("`rensei quickstart` takes", 1)[1].split("##", 1)[0]
    assert re.search(r"refused 30 minutes after the run", quickstart)
