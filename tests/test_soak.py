"""Soak: writers and readers of every kind on one home for ~20 s, as a user (or cron) runs them:
seven loops, each running the installed ``rensei`` command as a fresh process per iteration.
Zero failures; every acknowledged append (exit 0) is stored exactly once and nothing else is;
the chain verifies; every checkpoint (stored and exported) verifies.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.core.routing.edits import MUTATION_RECORD
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).parent.parent / "rensei_routing" / "examples"
SOAK_SECONDS = 20.0

_LOOP = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from pathlib import Path

    role, home, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    seconds, go = float(sys.argv[4]), Path(sys.argv[5])
    context = json.loads(Path(sys.argv[6]).read_text())
    rensei = Path(sys.executable).with_name("rensei")
    command = [str(rensei)] if rensei.exists() else [
        sys.executable, "-c", "from rensei_routing.cli import cli; cli()"]
    while not go.exists():
        time.sleep(0.01)
    end = time.monotonic() + seconds
    log = {"runs": 0, "failures": [], "acked": [], "notes": []}
    i = 0
    while time.monotonic() < end:
        i += 1
        args = []
        marks = []
        if role == "explain-record":
            marks = [f"{role}-{i}"]
            args += ["explain", json.dumps({**context, "principal_id": marks[0]}), "--record",
                     "--json"]
        elif role == "batch-record":
            marks = [f"{role}-{i}-{j}" for j in range(5)]
            batch = out.with_suffix(f".{i}.jsonl")
            batch.write_text("".join(json.dumps({**context, "principal_id": m}) + "\\n"
                                     for m in marks))
            args += ["explain-batch", str(batch), "--record"]
        elif role == "checkpoint":
            note = out.with_suffix(f".{i}.note")
            args += ["audit", "checkpoint", "-o", str(note)]
        elif role == "verify":
            args += ["audit", "verify"]
        elif role == "policy-show":
            args += ["policy", "show"]
        elif role == "explain":
            args += ["explain", json.dumps(context)]
        elif role == "tail":
            args += ["audit", "tail", "-n", "5"]
        result = subprocess.run([*command, *args, "--home", home], capture_output=True,
                                text=True)
        log["runs"] += 1
        if result.returncode != 0:
            log["failures"].append([args, result.returncode, result.stderr[-500:]])
            continue
        log["acked"] += marks
        if role == "checkpoint":
            log["notes"].append(str(note))
    out.write_text(json.dumps(log))
    """
)

WRITERS = ("explain-record", "batch-record", "checkpoint")
READERS = ("verify", "policy-show", "explain", "tail")


@pytest.mark.slow
def test_soak_writers_and_readers_never_fail_and_lose_nothing(
    tmp_path: Path, runner: CliRunner
) -> None:
    home = tmp_path / "home"
    assert runner.invoke(cli, ["--home", str(home), "init"]).exit_code == 0
    saved = runner.invoke(
        cli, ["--home", str(home), "policy", "save", str(EXAMPLES / "policies.json")]
    )
    assert saved.exit_code == 0, saved.output
    go = tmp_path / "go"
    outs = {role: tmp_path / f"{role}.json" for role in WRITERS + READERS}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _LOOP,
                role,
                str(home),
                str(out),
                str(SOAK_SECONDS),
                str(go),
                str(EXAMPLES / "context.json"),
            ],
            stderr=subprocess.PIPE,
        )
        for role, out in outs.items()
    ]
    time.sleep(1.0)  # every process imported and waiting
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=SOAK_SECONDS + 120)
        assert proc.returncode == 0, err.decode()
    logs = {role: json.loads(out.read_text()) for role, out in outs.items()}

    summary = {role: log["runs"] for role, log in logs.items()}
    print(f"runs per loop in {SOAK_SECONDS:.0f} s: {summary}")
    assert {role: log["failures"] for role, log in logs.items()} == {r: [] for r in logs}
    assert all(runs >= 3 for runs in summary.values()), summary

    with AuditLog.open(Home(home)) as log:
        result = log.verify()  # every stored checkpoint too
        assert result.ok, result
        records = log.tail(10**9)
    payloads = [json.loads(r.payload_bytes) for r in records]
    marks = [  # every decision's mark (the policy save's own record carries none)
        p["explanation"]["context"].get("principal_id")
        for p in payloads
        if p.get("record_type") != MUTATION_RECORD
    ]
    acked = [m for role in WRITERS for m in logs[role]["acked"]]
    assert acked, "nothing was appended"
    counts: dict[str, int] = {}
    for m in marks:
        counts[m] = counts.get(m, 0) + 1
    assert [m for m in acked if counts.get(m) != 1] == []  # each exactly once
    assert sorted(m for m in marks if m is not None) == sorted(acked)  # and nothing else

    notes = logs["checkpoint"]["notes"]
    assert notes
    check = ["--home", str(home), "audit", "verify", "--json"]
    for note in notes:
        check += ["--checkpoint", note]
    verified = runner.invoke(cli, check)
    assert verified.exit_code == 0, verified.output
