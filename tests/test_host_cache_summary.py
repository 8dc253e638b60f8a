"""One truth about the host cache (issue 29, new user 2): on quickstart's home (a snapshot
synced over HTTP from the home's own endpoint, then the dead source cleared) ``host status``
said "no snapshot source configured: nothing is cached" while quickstart, ``explain --snapshot``
and the console showed the snapshot cached, and ``doctor`` said the same wrong thing.
``host/status.py:summarise`` now says what is cached and whether a source renews it, and every
reader says the same, at every age: fresh, degraded, expired; and with nothing cached. Without a
source ``host status`` still prints no ``Ruleset snapshot:`` line (document 000: "absent, not
wrong"); its note names the cached snapshot instead.

Real processes over a home built by quickstart's own step (``compile_serve_sync``: a real
``serve`` on loopback, a real sync), the clock shifted the documented way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.host.cache import host_cache
from rensei_routing.host.status import host_status_data
from rensei_routing.ops.doctor import host_cache_check
from rensei_routing.ops.quickstart import compile_serve_sync
from rensei_routing.plugins.manager import get_plugin_manager, snapshot_validators, vocabulary
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
CONTEXT = json.dumps({"repo": "acme/widgets", "repo_class": "client", "principal_id": "reviewer"})


def rensei(*args: str, offset_s: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RENSEI_REHEARSAL_CLOCK_OFFSET_S": str(offset_s)}
    return subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", "--no-plugins", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def quickstarted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home as quickstart leaves it: its snapshot cached, no source configured."""
    path = tmp_path_factory.mktemp("qs") / "home"
    runner = CliRunner()
    for args in (
        ["init", "--org", "acme"],
        ["org", "load", str(EXAMPLES / "org.json")],
        ["policy", "save", str(EXAMPLES / "policies.json")],
    ):
        done = runner.invoke(cli, [*args, "--home", str(path)])
        assert done.exit_code == 0, done.output
    pm = get_plugin_manager(load_entrypoints=False)
    served = compile_serve_sync(
        Home(path),
        clock=lambda: datetime.now(UTC),
        validators=snapshot_validators(pm),
        vocabulary=vocabulary(pm),
    )
    assert served.ruleset_rev == "acme@1" and served.synced.startswith("adopted: acme@1")
    assert host_cache(path).config().has_source is False  # quickstart cleared the dead source
    return path


def _doctor(home: Path, offset_s: int) -> tuple[str, str]:
    done = rensei("doctor", "--json", "--home", str(home), offset_s=offset_s)
    check = next(c for c in json.loads(done.stdout)["checks"] if c["check"] == "host cache")
    return check["status"], check["detail"]


@pytest.mark.parametrize(
    ("offset_s", "state", "doctor", "flag"),
    [
        (0, "fresh", "ok", ""),
        (400, "degraded", "warn", " (degraded)"),
        (1900, "expired", "fail", " (expired: refusing to decide from it)"),
    ],
    ids=["fresh", "degraded", "expired"],
)
def test_every_reader_says_the_cached_snapshot_and_the_missing_source(
    quickstarted: Path, offset_s: int, state: str, doctor: str, flag: str
) -> None:
    home = str(quickstarted)
    status = rensei("host", "status", "--home", home, offset_s=offset_s)
    assert status.returncode == 0, status.stderr
    # no source: the `Ruleset snapshot:` line is absent, not wrong (document 000), and the
    # note says what is cached, at its age, and what would renew it
    assert status.stdout == "" and "nothing is cached" not in status.stderr
    said = "note: no snapshot source configured: nothing renews the cached acme@1 (age "
    note = next(x for x in status.stderr.splitlines() if x.startswith(said))
    assert f"{flag}; next: " in note
    assert "`rensei host sync --from FILE" in note
    doc = json.loads(rensei("host", "status", "--json", "--home", home, offset_s=offset_s).stdout)
    assert doc["snapshot"]["state"] == state and doc["source"]["configured"] is False

    found, detail = _doctor(quickstarted, offset_s)
    assert found == doctor, detail
    assert detail.startswith("acme@1 (age ") and detail.endswith(
        f"{flag}; 1 trusted key(s); no snapshot source configured: nothing renews it"
    )

    explained = rensei("explain", "--snapshot", CONTEXT, "--home", home, offset_s=offset_s)
    if state == "expired":
        assert explained.returncode == 1 and "acme@1" in explained.stderr
        assert "past RefuseAfter" in explained.stderr
    else:
        assert explained.returncode == 0, explained.stderr
        assert "acme@1 (cached snapshot, age " in explained.stdout
        assert ("degraded" in explained.stderr) == (state == "degraded")

    # the console's doctor table runs the same check (console/state.py: host_cache_check)
    moment = datetime.now(UTC) + timedelta(seconds=offset_s)
    console = host_cache_check(host_cache(quickstarted), now=moment)
    assert console.status == doctor and console.detail.startswith("acme@1 (age ")
    assert console.detail.endswith("no snapshot source configured: nothing renews it")
    from rensei_routing.host.status import summarise  # the one reading they all share

    summary = summarise(host_status_data(host_cache(quickstarted), now=moment))
    assert (summary.state, summary.held, summary.configured) == (state, "acme@1", False)


def test_with_nothing_cached_every_reader_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert rensei("init", "--home", str(home)).returncode == 0
    said = "no snapshot source configured: nothing is cached"
    status = rensei("host", "status", "--home", str(home))
    assert status.returncode == 0 and status.stdout == "" and said in status.stderr
    assert _doctor(home, 0) == ("ok", said)
    explained = rensei("explain", "--snapshot", CONTEXT, "--home", str(home))
    assert explained.returncode == 1 and "Traceback" not in explained.stderr
    assert said in explained.stderr
    assert "`rensei host trust KEY` then `rensei host sync --from FILE" in explained.stderr
    assert not (home / "host").exists()  # none of them wrote a host cache
