"""A simulated fleet (issue 23, part 3): 2 ``rensei serve`` replicas on one PostgreSQL
database, 50 ``rensei host run`` processes polling both on loopback (interval 1 s, no jitter,
replica A first), a policy write through replica A, then A killed (SIGKILL).

Bars, checked from every host's own log (each poll logs the revision it holds after it):
every host reaches the new revision within its interval + 1 s of the write; no host ever holds
an older revision after a newer one; no host error but recorded failed fetches (a fetch from
the dead A, recorded, then B answering). The test prints the hosts' snapshot age over the run
(p50/p99, measured at each poll) and each host's time from the write to the new revision.

Deterministic: every wait is a bounded poll with a generous ceiling; the timing bar is the
issue's. Selected with ``-m fleet``; part of the default suite.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

import pytest

from rensei_routing.host.cache import HostConfig, host_cache
from rensei_routing.signing import load_public_key

from .test_serve import EXAMPLES, Serve, rensei, serving
from .test_serve_replicas import make_replicas, token_of

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

HOSTS = 50
INTERVAL_S = 1.0
BAR_S = INTERVAL_S + 1.0
#: Generous ceilings: 50 Python processes start on a shared 2-core machine.
START_CEILING_S = 300.0
CONVERGE_CEILING_S = 60.0

_LINE = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?P<name>\S+) (?P<text>.*)$")
_HELD = re.compile(r"^(adopted|unchanged|not modified): acme@(?P<rev>\d+)")
_COMPILED = re.compile(r"\(compiled (?P<compiled>[0-9T:.\-]+Z)\)")


@dataclass
class Host:
    """One ``host run`` process and its log file."""

    home: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None
    polls: list[tuple[float, int, float | None]] = field(default_factory=list)

    def lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def held(self) -> int:
        """The revision the host's latest poll line says it holds (0: none yet)."""
        for line in reversed(self.lines()):
            found = _LINE.match(line)
            if found and (held := _HELD.match(found["text"])):
                return int(held["rev"])
        return 0


def _epoch_local(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _epoch_utc(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _until(check: object, what: str, ceiling_s: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < ceiling_s:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {ceiling_s}s waiting for {what}")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _start_hosts(tmp_path: Path, a: Serve, b: Serve, replica: Path) -> list[Host]:
    public = load_public_key(replica / "keys" / "host.pub")
    token_file = replica / "keys" / "serve.token"
    hosts = []
    env = {k: v for k, v in os.environ.items() if k != "RENSEI_HOME"}
    for i in range(HOSTS):
        home = tmp_path / f"host-{i:02d}"
        cache = host_cache(home)
        cache.trust(public)
        cache.save_config(
            HostConfig(
                endpoint=f"{a.url},{b.url}",
                token_file=str(token_file),
                interval_s=INTERVAL_S,
                jitter_s=0.0,
            )
        )
        host = Host(home=home, log_path=tmp_path / f"host-{i:02d}.log")
        host.log_file = open(host.log_path, "wb")  # noqa: SIM115 - closed in _stop_hosts
        host.proc = subprocess.Popen(
            [sys.executable, "-m", "rensei_routing.cli", "host", "run", "--home", str(home)],
            stdout=subprocess.DEVNULL,
            stderr=host.log_file,
            env=env,
        )
        hosts.append(host)
    return hosts


def _stop_hosts(hosts: list[Host]) -> list[int | None]:
    for host in hosts:
        if host.proc is not None and host.proc.poll() is None:
            host.proc.send_signal(signal.SIGTERM)
    codes = []
    for host in hosts:
        if host.proc is None:
            codes.append(None)
            continue
        try:
            codes.append(host.proc.wait(60))
        except subprocess.TimeoutExpired:
            host.proc.kill()
            codes.append(host.proc.wait(10))
        if host.log_file is not None:
            host.log_file.close()
    return codes


def test_a_fleet_of_50_hosts_follows_a_write_through_a_replica_that_is_then_killed(
    tmp_path: Path, pg_url: str
) -> None:
    homes = make_replicas(tmp_path, pg_url)
    token = token_of(homes[0])
    assert token == token_of(homes[1])
    with (
        serving(homes[0], "--watch-interval", "0.5", "--reseal-after", "5") as a,
        serving(homes[1], "--watch-interval", "0.5", "--reseal-after", "5") as b,
    ):
        hosts = _start_hosts(tmp_path, a, b, homes[0])
        try:
            _until(
                lambda: all(h.held() == 1 for h in hosts),
                "every host to hold revision 1",
                START_CEILING_S,
            )
            rensei("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(homes[0]))
            written = time.time()
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(30)
            _until(
                lambda: all(h.held() == 2 for h in hosts),
                "every host to hold revision 2",
                CONVERGE_CEILING_S,
            )
            settled = time.time()
            _until(  # a few more polls of every host, all from B now
                lambda: all(_polls_after(h, settled) >= 3 for h in hosts),
                "three more polls of every host",
                CONVERGE_CEILING_S,
            )
        finally:
            codes = _stop_hosts(hosts)
    assert codes == [0] * HOSTS, codes
    _check_and_report(hosts, written)


def _polls_after(host: Host, moment: float) -> int:
    count = 0
    for line in host.lines():
        found = _LINE.match(line)
        if found and _HELD.match(found["text"]) and _epoch_local(found["at"]) > moment:
            count += 1
    return count


def _check_and_report(hosts: list[Host], written: float) -> None:
    reach: list[float] = []
    ages: list[float] = []
    failed_fetches = 0
    for host in hosts:
        held_rev, held_compiled, first_new = 0, None, None
        for line in host.lines():
            found = _LINE.match(line)
            if found is None:  # "status on ...", "stopped"
                assert "Traceback" not in line and "error" not in line.lower(), line
                continue
            at, text = _epoch_local(found["at"]), found["text"]
            if "failed fetch(es)" in text:
                failed_fetches += 1
            held = _HELD.match(text)
            if held is None:
                assert text.startswith("poll failed") and "fetch" in text.lower(), (
                    f"{host.home.name}: an error that is not a recorded failed fetch: {text}"
                )
                failed_fetches += 1
                continue
            revision = int(held["rev"])
            assert revision >= held_rev, (
                f"{host.home.name} went back from revision {held_rev} to {revision}"
            )
            if (compiled := _COMPILED.search(text)) is not None:
                held_compiled = _epoch_utc(compiled["compiled"])
            held_rev = revision
            if revision == 2 and first_new is None:
                first_new = at
            if held_compiled is not None:
                ages.append(max(0.0, at - held_compiled))
        assert first_new is not None, f"{host.home.name} never held revision 2"
        reach.append(first_new - written)
    print(
        f"\nfleet: {len(hosts)} hosts, interval {INTERVAL_S}s; write -> new revision at a host: "
        f"p50 {_percentile(reach, 0.5):.3f}s, p99 {_percentile(reach, 0.99):.3f}s, "
        f"max {max(reach):.3f}s (bar {BAR_S}s); snapshot age at the hosts over the run: "
        f"p50 {_percentile(ages, 0.5):.3f}s, p99 {_percentile(ages, 0.99):.3f}s over "
        f"{len(ages)} polls; {failed_fetches} poll(s) with a recorded failed fetch"
    )
    late = {h.home.name: round(r, 3) for h, r in zip(hosts, reach, strict=True) if r > BAR_S}
    assert not late, f"hosts past interval + 1 s of the write: {late}"
    assert failed_fetches > 0  # the dead replica was tried and recorded, then B answered
