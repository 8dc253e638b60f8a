"""``rensei enforce arm|disarm|gate|status`` (rensei_routing/cli/enforce.py): the answers, and
every bad input a typed one-line refusal with a non-zero exit that leaves the stored rows, the
chain and the hint exactly as they were."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.home import Home

from .enforce_support import REPO, chain, hint, locked_to_zai, make_home, payloads, rows

#: The evidence was recorded at a fixed past time: a window that reaches back to it.
WIDE = ("--window", "3650d")


def run(runner: CliRunner, home: Home, *args: str) -> Any:
    return runner.invoke(
        cli, ["enforce", *args, "--home", str(home.path)], env={"RENSEI_ACTOR": "carol"}
    )


def refused(result: Any, code: str) -> None:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {code}"), result.stderr


def stored(home: Home) -> tuple[object, ...]:
    return chain(home), rows(home), hint(home)


def test_arm_status_disarm(tmp_path: Path, runner: CliRunner) -> None:
    home = make_home(tmp_path)
    armed = run(runner, home, "arm", "--repo", "Acme/Widgets", *WIDE, "--trip-rate", "0.2")
    assert armed.exit_code == 0, armed.output
    assert "armed acme/widgets on revision 1" in armed.stdout
    shown = run(runner, home, "status", "--json")
    data = json.loads(shown.stdout)
    assert data["armed"] == [REPO]
    (canary,) = data["canaries"]
    assert (canary["state"], canary["actor"], canary["trip_rate"], canary["trip_window_s"]) == (
        "armed",
        "carol",
        0.2,
        3600,
    )
    text = run(runner, home, "status")
    assert text.stdout.startswith("acme/widgets: armed, revision 1")
    gone = run(runner, home, "disarm", "--repo", REPO, "--json")
    assert json.loads(gone.stdout)["disarmed"] == REPO
    assert json.loads(run(runner, home, "status", "--json").stdout)["armed"] == []
    (disarm_record,) = payloads(home, "enforce-disarm")
    assert disarm_record["actor"] == "carol"


def test_status_of_a_home_never_armed(tmp_path: Path, runner: CliRunner) -> None:
    home = make_home(tmp_path, evidence=0)
    result = run(runner, home, "status")
    assert result.exit_code == 0 and "nothing armed" in result.stdout


def test_gate_alone_prints_and_records_its_verdict(tmp_path: Path, runner: CliRunner) -> None:
    home = make_home(tmp_path)
    passed = run(runner, home, "gate", "--repo", REPO, *WIDE, "--json")
    assert passed.exit_code == 0, passed.output
    assert json.loads(passed.stdout)["verdict"] == "pass"
    few = run(runner, home, "gate", "--repo", REPO)  # the default 7d window: no evidence
    assert few.stdout.startswith("gate acme/widgets revision 1: inconclusive (samples)")
    refused(few, "gate-inconclusive")
    assert [p["verdict"] for p in payloads(home, "enforce-gate")] == ["pass", "inconclusive"]
    assert rows(home) == ([], [])  # a gate alone arms nothing


def test_a_refused_arm_keeps_its_verdict_and_writes_no_arm_state(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = make_home(tmp_path, locked_to_zai())
    result = run(runner, home, "arm", "--repo", REPO, *WIDE)
    refused(result, "gate-fail")
    assert "refusal-rate" in result.stderr
    assert [p["verdict"] for p in payloads(home, "enforce-gate")] == ["fail"]
    assert rows(home) == ([], []) and hint(home) == b""


def _corrupt(home: Home) -> None:
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute(
            "UPDATE policy_revisions SET body = CAST(? AS BLOB) WHERE revision = 1", (b"[",)
        )


def _tamper(home: Home) -> None:
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute("UPDATE audit_records SET payload = ? WHERE seq = 3", (b'{"n":1}',))


@pytest.mark.parametrize(
    ("args", "code", "damage"),
    [
        (("arm", "--repo", "acme-widgets"), "non-canonical-repo", None),
        (("arm", "--repo", "acme/widgets/extra"), "non-canonical-repo", None),
        (("gate", "--repo", "https://github.com/acme/widgets"), "non-canonical-repo", None),
        (("disarm", "--repo", "acme"), "non-canonical-repo", None),
        (("arm", "--repo", REPO, *WIDE), "policy-store-corrupt", _corrupt),
        (("arm", "--repo", REPO, *WIDE), "evidence-unreadable", _tamper),
        (("gate", "--repo", REPO, *WIDE), "evidence-unreadable", _tamper),
        (("arm", "--repo", REPO, *WIDE, "--override"), "override-without-reason", None),
        (
            ("arm", "--repo", REPO, *WIDE, "--override", "--reason", " "),
            "override-without-reason",
            None,
        ),
        (("arm", "--repo", REPO, *WIDE, "--reason", "because"), "override-without-reason", None),
        (("arm", "--repo", REPO, *WIDE, "--trip-window", "1h"), "bad-trip-rule", None),
        (("arm", "--repo", REPO, *WIDE, "--rev", "9"), "no-policy-revision", None),
        (("disarm", "--repo", "acme/gadgets"), "not-armed", None),
    ],
    ids=[
        "arm-slug",
        "arm-two-slashes",
        "gate-url",
        "disarm-owner-only",
        "arm-over-corrupt-store",
        "arm-unreadable-chain",
        "gate-unreadable-chain",
        "override-without-reason",
        "override-blank-reason",
        "reason-without-override",
        "trip-window-without-rate",
        "no-such-revision",
        "disarm-never-armed",
    ],
)
def test_bad_input_is_refused_on_one_line_and_writes_nothing(
    tmp_path: Path, runner: CliRunner, args: tuple[str, ...], code: str, damage: Any
) -> None:
    home = make_home(tmp_path)
    if damage is not None:
        damage(home)
    before = stored(home)
    refused(run(runner, home, *args), code)
    assert stored(home) == before


def test_disarming_twice_is_refused_the_second_time(tmp_path: Path, runner: CliRunner) -> None:
    home = make_home(tmp_path)
    assert run(runner, home, "arm", "--repo", REPO, *WIDE).exit_code == 0
    assert run(runner, home, "disarm", "--repo", REPO).exit_code == 0
    before = stored(home)
    result = run(runner, home, "disarm", "--repo", REPO)
    refused(result, "not-armed")
    assert "already disarmed" in result.stderr
    assert stored(home) == before


@pytest.mark.parametrize("value", ["7", "0d", "1w", "-1h", "h"])
def test_a_bad_duration_is_a_usage_error(tmp_path: Path, runner: CliRunner, value: str) -> None:
    home = make_home(tmp_path, evidence=0)
    before = stored(home)
    result = run(runner, home, "gate", "--repo", REPO, "--window", value)
    assert result.exit_code == 2 and "duration" in result.stderr
    assert stored(home) == before


def test_a_credential_shaped_reason_is_refused(tmp_path: Path, runner: CliRunner) -> None:
    home = make_home(tmp_path, locked_to_zai())
    before = stored(home)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    result = run(runner, home, "arm", "--repo", REPO, *WIDE, "--override", "--reason", token)
    assert result.exit_code == 1 and token not in result.stderr
    assert stored(home) == before
