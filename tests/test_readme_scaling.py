"""The README's scaling walk-through ("Scaling: replicas on PostgreSQL"), run as printed in bash:
a throwaway PostgreSQL started by hand, two ``rensei serve`` replicas sharing it, three hosts
polling both, a write through replica a, a killed, then each host's evidence ingested into the
fleet database and reported, and a ``pg_dump``; with ``rensei`` on PATH as ``. .venv/bin/activate``
puts it (and the reference plugin installed, as the README asks).

The substitutions, each for a shared test machine, and nothing else:

- free ports instead of 55432 (PostgreSQL), 8787 (replica a) and 8788 (replica b); the newest
  ``/usr/lib/postgresql/<major>/bin`` instead of ``.../15/bin`` if 15 is not the one installed;
- after the second ``serve ... &`` line the script waits (bounded) for both ports to listen, and
  before the ``sleep 4; rensei host status`` line it waits (bounded) until every host holds
  acme@2, where a person typing needs no wait beyond the README's sleeps;
- the block runs in a temporary working directory (``mktemp -d`` inside it too, through
  ``TMPDIR``), which links ``rensei_routing`` and ``plugins`` to the checkout: the two
  directories the block reads, so everything it writes stays out of the repository.

Nothing is substituted for root: the block itself runs PostgreSQL's server commands as the
``postgres`` user when it runs as root (``$AS``), as CI runs it.

The block runs in its own process group; whatever happens, the test kills the group (the
replica, the hosts) and stops the cluster (``pg_ctl -m immediate``; the postmaster leaves the
group with ``setsid``), then removes the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.ops.pgcluster import find_bindir

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
HOSTS = ("h1", "h2", "h3")


def scaling_lines() -> list[str]:
    """The lines of the README's scaling block (blank lines dropped)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Scaling: replicas on PostgreSQL", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(*ports: int) -> str:
    """Bash: wait (bounded, 30 s) until every port accepts, then fail if one still does not."""
    probe = " && ".join(f"(exec 3<>/dev/tcp/127.0.0.1/{p}) 2>/dev/null" for p in ports)
    return f"for _ in $(seq 600); do {probe} && break; sleep 0.05; done; {probe}"


def _hosts_hold(rev: str) -> str:
    """Bash: wait (bounded, about a minute) until every host's status names ``rev``."""
    check = " && ".join(
        f'rensei host status --json --home {h} | grep -q \'"rulesetRev": "{rev}"\'' for h in HOSTS
    )
    return f"for _ in $(seq 120); do {check} && break; sleep 0.25; done; {check}"


def _machine(line: str, pg: Path, ports: dict[str, int]) -> str:
    """One line with this machine's ports and PostgreSQL directory (nothing else changes)."""
    for printed, port in ports.items():
        line = line.replace(printed, str(port))
    return line.replace("/usr/lib/postgresql/15/bin", str(pg))


def database_lines(lines: list[str]) -> list[str]:
    """The block's database lines (through ``URL=...``) and its last line (which stops it)."""
    end = next(i for i, line in enumerate(lines) if line.startswith("URL="))
    return [*lines[: end + 1], lines[-1]]


def script_for(lines: list[str], pg: Path, ports: dict[str, int]) -> str:
    """The bash script: the block's lines with the substitutions the module docstring lists."""
    out = ["set -eu"]
    for line in lines:
        line = _machine(line, pg, ports)
        if line.startswith("sleep 4; rensei host status"):
            out.append(_hosts_hold("acme@2"))
        out.append(line)
        if line.startswith("rensei serve --home b"):
            out.append(_listening(ports["8787"], ports["8788"]))
    return "\n".join(out)


def _stop_clusters(tmp: Path, pg: Path) -> None:
    """Stop every cluster the block started under ``tmp`` (``mktemp -d`` through TMPDIR)."""
    for pid_file in tmp.glob("*/data/postmaster.pid"):
        argv = [str(pg / "pg_ctl"), "-D", str(pid_file.parent), "-m", "immediate", "-w", "stop"]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, capture_output=True, check=False, timeout=120)


def _status(env: dict[str, str], home: Path) -> dict[str, object]:
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "rensei"),
            "host",
            "status",
            "--json",
            "--home",
            str(home),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


def test_the_readme_lists_the_steps_it_claims() -> None:
    text = "\n".join(scaling_lines())
    for step in ("rensei serve --home a", "rensei serve --home b", "kill -9 $A", "fleet ingest"):
        assert step in text, step
    assert text.count("rensei fleet ingest") == 2  # the second adds 0


def test_a_host_only_home_has_no_evidence_to_export(tmp_path: Path, runner: CliRunner) -> None:
    """Why the walk-through runs ``rensei init`` per host: ``host trust`` and ``host sync`` alone
    make only the cache (``host/``), with no audit chain and no host key to sign a checkpoint."""
    control, host = tmp_path / "a", tmp_path / "h1"
    assert runner.invoke(cli, ["init", "--home", str(control), "--org", "acme"]).exit_code == 0
    trusted = runner.invoke(
        cli, ["host", "trust", str(control / "keys/host.pub"), "--home", str(host)]
    )
    assert trusted.exit_code == 0, trusted.output
    before = sorted(p.relative_to(host) for p in host.rglob("*"))
    spawns = ROOT / "plugins/rensei-seams-hydraflow/samples/hydraflow-spawns.jsonl"
    for argv in (
        ["audit", "checkpoint", "-o", str(tmp_path / "h1.checkpoint")],
        ["shadow", "record", str(spawns)],
    ):
        refused = runner.invoke(cli, [*argv, "--home", str(host)])
        assert refused.exit_code == 1, refused.output
        assert isinstance(refused.exception, SystemExit)  # a message, not a traceback
        assert refused.output.count("\n") == 1 and "run `rensei init` first" in refused.output
    assert sorted(p.relative_to(host) for p in host.rglob("*")) == before
    assert not (tmp_path / "h1.checkpoint").exists() and not (host / "keys").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_database_lines_run_as_printed_by_whoever_runs_them() -> None:
    """The block's first lines start PostgreSQL as printed, as root too (CI's user: initdb
    refused root at the first line, so nothing after it ran), and its last line's ``$AS
    $PG/pg_ctl ... stop`` stops it."""
    pg = find_bindir()
    base = Path(tempfile.mkdtemp(prefix="rensei-readme-db-"))
    base.chmod(0o755)  # the postgres user reaches $D through it (as /tmp lets it)
    tmp = base / "tmp"
    tmp.mkdir()
    lines = database_lines(scaling_lines())
    stop = lines[-1].split("; ", 1)[1].split("#", 1)[0].strip()  # after `kill $(jobs -pr);`
    ports = {"55432": _free_port()}
    script = "\n".join(
        [
            "set -eu",
            *(_machine(line, pg, ports) for line in lines[:-1]),
            f'{pg}/psql -At "$URL" -c "SELECT current_database(), current_user"',
            _machine(stop, pg, ports),
        ]
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["TMPDIR"] = str(tmp)
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=base, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "control|rensei" in done.stdout.splitlines()
        assert stop.startswith("$AS $PG/pg_ctl") and stop.endswith(" stop"), stop
        assert not list(tmp.glob("*/data/postmaster.pid"))  # stopped by the block's own line
    finally:
        _stop_clusters(tmp, pg)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_scaling_walk_through_runs_as_printed() -> None:
    bindir = Path(sys.executable).parent
    if not (bindir / "rensei").exists():
        pytest.skip("the rensei console script is not installed beside this python")
    pytest.importorskip("psycopg")
    pytest.importorskip("rensei_seams_hydraflow")
    pg = find_bindir()  # PostgresUnavailable names the package, as the other PostgreSQL tests do
    root = os.geteuid() == 0
    if root and shutil.which("runuser") is None:
        pytest.skip("root without runuser cannot run PostgreSQL")
    ports = {"55432": _free_port(), "8787": _free_port(), "8788": _free_port()}
    base = Path(tempfile.mkdtemp(prefix="rensei-readme-scaling-"))
    base.chmod(0o755)  # the postgres user reaches $D through it
    work, tmp, user = base / "work", base / "tmp", base / "user"
    for d in (work, tmp, user):
        d.mkdir()
    for name in ("rensei_routing", "plugins"):
        (work / name).symlink_to(ROOT / name)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PG") and k not in ("RENSEI_ROUTING_LOAD_PLUGINS", "RENSEI_HOME")
    }
    env.update(HOME=str(user), TMPDIR=str(tmp), PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}")
    script = script_for(scaling_lines(), pg, ports)
    # files, not pipes: the block's background jobs hold its stdout open after bash exits
    with (base / "out").open("w") as out_f, (base / "err").open("w") as err_f:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=work,
            env=env,
            stdout=out_f,
            stderr=err_f,
            start_new_session=True,
        )
    try:
        try:
            code: int | None = proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            code = None  # the finally below kills it
        out = (base / "out").read_text(encoding="utf-8", errors="replace")
        err = (base / "err").read_text(encoding="utf-8", errors="replace")
        assert code == 0, (
            f"exit {code} (None: still running after 600 s)\n{out[-4000:]}{err[-4000:]}"
        )
        a, b = (f"http://127.0.0.1:{ports[p]}" for p in ("8787", "8788"))

        # both replicas served: each host adopted acme@1 from a, then took acme@2 from b
        for h in HOSTS:
            log = (work / f"{h}.log").read_text(encoding="utf-8")
            assert "acme@1" in log and a in log, log[-2000:]
            assert re.search(rf"acme@2 from {re.escape(b)}", log), log[-2000:]
            status = _status(env, work / h)
            snapshot, fetch = status["snapshot"], status["lastFetch"]
            assert isinstance(snapshot, dict) and snapshot["rulesetRev"] == "acme@2"
            assert isinstance(fetch, dict) and fetch["source"] == b and fetch["ok"] is True
        assert re.search(rf"Ruleset snapshot: acme@2 .*\nLast fetch: .* from {re.escape(b)}", out)

        # snapshot events: the writes and the compiles, in order
        events = re.findall(r"^\d+\t\S+\t(\S+)\t(\d+)\t", out, re.M)
        for event in (("policy.save", "1"), ("org.load", "1"), ("policy.save", "2")):
            assert event in events, events
        assert ("snapshot.compile", "2") in events

        # the ingest: every host's records up to its checkpoint (its whole export), then 0
        ingested = re.findall(
            r"^(h\d)\.jsonl: host (h\d): added ([\d,]+) record\(s\).*head (sha256:[0-9a-f]+)",
            out,
            re.M,
        )
        assert len(ingested) == 2 * len(HOSTS), out[-3000:]
        first, again = ingested[: len(HOSTS)], ingested[len(HOSTS) :]
        heads = {}
        for file_host, host, added, head in first:
            assert file_host == host
            lines = (work / f"{host}.jsonl").read_text(encoding="utf-8").count("\n")
            assert int(added.replace(",", "")) == lines == 3002  # as the README says
            heads[host] = head
        assert sorted(heads) == list(HOSTS)
        assert [(h, n, hd) for _, h, n, hd in again] == [(h, "0", heads[h]) for h in HOSTS]

        # the report: every host with its head, the snapshot it runs, non-empty agreement
        summary = re.search(
            r"^fleet: 3 host\(s\), 9,000 shadow record\(s\), agreed [\d,]+ \((.*?)\)", out, re.M
        )
        assert summary and summary.group(1) != "-", out[-3000:]
        by_host = out.split("by host:\n", 1)[1].split("by repo:", 1)[0]
        for h in HOSTS:
            assert re.search(rf"^  {h}\s+3,000 spawns  agreed\s+\d+\.\d%", by_host, re.M), by_host
            assert re.search(
                rf"^  {h}  3,002  {re.escape(heads[h][:19])}  .*  acme@2  2  ok$", out, re.M
            ), out[-2000:]

        # the backup
        dump = work / "control.dump"
        assert dump.is_file() and dump.read_bytes()[:5] == b"PGDMP"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _stop_clusters(tmp, pg)
        shutil.rmtree(base, ignore_errors=True)
