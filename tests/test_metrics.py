"""``GET /metrics`` over real HTTP on loopback: ``rensei serve`` and ``rensei host run --listen``
as real processes, and the app in-process over waitress for enforcement. The output passes
Debian's ``promtool check metrics``; values move with behaviour (a refused fetch, an admitted
and a refused claim, an enforced decision, an audit append); the auth rule of each daemon; a
hostile Host header changes nothing."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from pathlib import Path

import pytest

from rensei_routing.control.server import make_app, serve_in_thread
from rensei_routing.enforce import arm
from rensei_routing.enforce.enforcer import Enforcer
from rensei_routing.ops.exposition import Family, Sample, label_value, render
from rensei_routing.ops.metrics import HomeMetrics

from .enforce_support import NOW, REPO, STAMP, gateway_spawn, make_home
from .shadow_support import registry
from .test_serve import EXAMPLES, SNAPSHOT, _env, _token, rensei, serving

pytestmark = pytest.mark.slow

METRICS = "/metrics"


# -- promtool -------------------------------------------------------------------------------------


def promtool_check(text: str) -> None:
    """``promtool check metrics`` passes ``text`` with no lint problem. Without promtool the
    test is skipped, except under CI (``CI`` set), where it fails: ``.ci/run`` installs it."""
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing (Debian package `prometheus`; .ci/run installs it)")
        pytest.skip("promtool is missing: apt-get install prometheus")
    done = subprocess.run(
        [tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        done.stdout + done.stderr + "\n" + text
    )


def test_promtool_rejects_what_breaks_the_conventions() -> None:
    """The check is real: a counter without ``_total`` fails it."""
    if shutil.which("promtool") is None:
        promtool_check("")  # skips, or fails under CI
    bad = "# HELP rensei_things Things.\n# TYPE rensei_things counter\nrensei_things 1\n"
    with pytest.raises(AssertionError):
        promtool_check(bad)


# -- the renderer ---------------------------------------------------------------------------------


def test_render_escapes_help_and_label_values() -> None:
    family = Family(
        name="rensei_x_total",
        kind="counter",
        help='a \\ b\nc "d"',
        samples=(Sample((("reason", 'q"\\\n'),), 3),),
    )
    assert render([family]) == (
        '# HELP rensei_x_total a \\\\ b\\nc "d"\n'
        "# TYPE rensei_x_total counter\n"
        'rensei_x_total{reason="q\\"\\\\\\n"} 3\n'
    )


@pytest.mark.parametrize(
    ("name", "kind", "value"),
    [
        ("rensei_x", "counter", 1),
        ("rensei-x_total", "counter", 1),
        ("rensei_x_total", "counter", -1),
    ],
    ids=["counter-without-total", "bad-name", "negative-counter"],
)
def test_a_malformed_family_is_refused(name: str, kind: str, value: float) -> None:
    with pytest.raises(ValueError):
        Family.single(name, kind, "h", value)


def test_a_family_given_twice_is_refused() -> None:
    one = Family.single("rensei_x", "gauge", "h", 1)
    with pytest.raises(ValueError):
        render([one, one])


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("pool-not-granted", "pool-not-granted"),
        ("Principal:alice", "other"),
        ("a" * 49, "other"),
        ("x\ny", "other"),
        ("", "other"),
    ],
    ids=["code", "capitals-and-colon", "too-long", "newline", "empty"],
)
def test_a_stored_reason_becomes_a_label_only_in_the_shape_of_a_code(given: str, kept: str) -> None:
    assert label_value(given) == kept


# -- scraping -------------------------------------------------------------------------------------


def scrape(
    url: str, headers: dict[str, str] | None = None, timeout: float = 30
) -> tuple[int, Message, str]:
    request = urllib.request.Request(url + METRICS, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read().decode("utf-8")


def value(text: str, name: str, **labels: str) -> float | None:
    """The sample ``name{labels}`` of an exposition (``None`` when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    series = f"{name}{{{want}}}" if want else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, number = line.rpartition(" ")
        if key == series:
            return float(number)
    return None


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Message]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            r.read()
            return r.status, r.headers
    except urllib.error.HTTPError as e:
        with e:
            e.read()
            return e.code, e.headers


# -- rensei serve ---------------------------------------------------------------------------------


@pytest.fixture
def control(tmp_path: Path) -> Path:
    """A control home that is also its own host: it trusts its key and holds its snapshot, so
    claims can be decided and recorded in it."""
    home = tmp_path / "control"
    at = ("--home", str(home))
    rensei("init", *at, "--org", "org_a1b2c3")
    rensei("org", "load", str(EXAMPLES / "org.json"), *at)
    rensei("policy", "save", str(EXAMPLES / "policies.json"), *at)
    rensei("snapshot", "compile", *at)
    rensei("snapshot", "export", str(tmp_path / "snap.json"), *at)
    rensei("host", "trust", "--from-home", str(home), *at)
    rensei("host", "sync", "--from", str(tmp_path / "snap.json"), *at)
    return home


def test_serve_metrics_need_the_token_and_pass_promtool_and_move_with_behaviour(
    control: Path,
) -> None:
    token = _token(control)
    auth = {"Authorization": f"Bearer {token}"}
    at = ("--home", str(control))
    with serving(control) as serve:
        # the auth rule: what the snapshot route gives a caller without the token
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            code, head, body = scrape(serve.url, headers)
            snap_code, snap_head = _get(serve.url + SNAPSHOT, headers)
            assert (code, body) == (401, "") and snap_code == 401
            assert head["WWW-Authenticate"] == snap_head["WWW-Authenticate"]
        code, head, text = scrape(serve.url, auth)
        assert code == 200 and head["Content-Type"].startswith("text/plain; version=0.0.4")
        promtool_check(text)
        assert value(text, "rensei_store_up") == 1
        assert value(text, "rensei_snapshot_revision") == 1
        assert value(text, "rensei_snapshot_state", state="fresh") == 1
        assert value(text, "rensei_snapshot_degraded") == 0
        refused_before = value(text, "rensei_http_requests_total", route="snapshot", code="401")
        appends_before = value(text, "rensei_audit_appends_total")
        assert appends_before is not None
        assert value(text, "rensei_claims_admitted_total") == 0

        # a refused fetch (no token), an admitted claim, a refused claim
        assert _get(serve.url + SNAPSHOT)[0] == 401
        rensei("host", "claim", "--pool", "local-a", *at)
        assert rensei("host", "claim", "--pool", "nowhere", *at, check=False).returncode == 1
        code, _, text = scrape(serve.url, auth)
        assert code == 200
        promtool_check(text)
        after = value(text, "rensei_http_requests_total", route="snapshot", code="401")
        assert after == (refused_before or 0) + 1
        assert value(text, "rensei_claims_admitted_total") == 1
        assert value(text, "rensei_claims_refused_total", reason="pool-not-in-inventory") == 1
        assert value(text, "rensei_audit_appends_total") == appends_before + 2
        assert value(text, "rensei_sessions", state="open") == 0

        # the background verification ran and passed (started by the first scrape)
        deadline = time.monotonic() + 60
        while value(text, "rensei_audit_verify_runs_total", result="ok") != 1:
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
            text = scrape(serve.url, auth)[2]
        assert value(text, "rensei_audit_verify_ok") == 1

        # a hostile Host header: the same answer, nothing of it reflected
        code, _, hostile = scrape(serve.url, {**auth, "Host": "evil.example:1"})
        assert code == 200 and "evil" not in hostile
        assert {line.split("{")[0].split(" ")[0] for line in hostile.splitlines()} == {
            line.split("{")[0].split(" ")[0] for line in text.splitlines()
        }


# -- rensei host run --listen ---------------------------------------------------------------------


@contextmanager
def host_running(home: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    log = home.parent / "host-run.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rensei_routing.cli", "host", "run", "--home", str(home), *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while (
            found := re.search(r"status on (http://127\.0\.0\.1:\d+)/", log.read_text())
        ) is None:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield found.group(1), proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _until(url: str, check: object, what: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        code, _, text = scrape(url)
        assert code == 200
        if callable(check) and check(text):
            return text
        assert time.monotonic() < deadline, f"{what}:\n{text}"
        time.sleep(0.1)


def test_host_run_metrics_take_no_token_pass_promtool_and_count_polls(
    control: Path, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    source = tmp_path / "carried.json"
    shutil.copyfile(tmp_path / "snap.json", source)
    rensei("init", "--home", str(host), "--org", "org_a1b2c3")
    rensei("host", "trust", "--from-home", str(control), "--home", str(host))
    rensei("host", "sync", "--from", str(source), "--home", str(host))
    listen = ("--listen", "127.0.0.1:0", "--interval", "0.1", "--jitter", "0")
    with host_running(host, *listen) as (url, _, _):
        # the status route takes no token, nor does /metrics; a token given changes nothing
        assert _get(url + "/api/daemon/routing/config")[0] == 200
        text = _until(
            url,
            lambda t: (value(t, "rensei_snapshot_fetches_total", result="ok") or 0) >= 1,
            "a first poll",
        )
        promtool_check(text)
        assert scrape(url, {"Authorization": "Bearer anything"})[0] == 200
        assert value(text, "rensei_snapshot_revision") == 1
        assert value(text, "rensei_snapshot_state", state="fresh") == 1
        assert value(text, "rensei_store_up") == 1

        # a tampered copy at the source: every poll refuses it (verification), keeps its copy
        body = source.read_bytes()
        source.write_bytes(body.replace(b'"revision":1', b'"revision":7', 1))
        text = _until(
            url,
            lambda t: (value(t, "rensei_snapshots_refused_total", reason="verification") or 0) >= 1,
            "a refused copy",
        )
        promtool_check(text)
        assert value(text, "rensei_snapshot_revision") == 1
        assert value(text, "rensei_snapshots_adopted_total") == 0

        # the source gone: the fetch fails
        source.unlink()
        text = _until(
            url,
            lambda t: (value(t, "rensei_snapshot_fetches_total", result="failed") or 0) >= 1,
            "a failed fetch",
        )
        appended = value(text, "rensei_audit_appends_total")
        assert appended is not None
        rensei("host", "claim", "--pool", "local-a", "--home", str(host))
        text = _until(
            url,
            lambda t: value(t, "rensei_audit_appends_total") == appended + 1,
            "the claim's append",
        )
        assert value(text, "rensei_claims_admitted_total") == 1
        promtool_check(text)


def test_host_run_on_a_home_without_a_database_reports_the_store_down(tmp_path: Path) -> None:
    host = tmp_path / "bare"
    with host_running(host, "--listen", "127.0.0.1:0") as (url, _, _):
        code, _, text = scrape(url)
    assert code == 200
    promtool_check(text)
    assert value(text, "rensei_store_up") == 0
    assert value(text, "rensei_snapshot_state", state="none") == 1
    assert value(text, "rensei_audit_appends_total") is None
    assert not (host / "rensei.db").exists()


# -- enforcement, in-process over waitress ---------------------------------------------------------


def test_an_enforced_decision_moves_its_outcome_counter(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    arm(home, REPO, now=NOW, actor="alice")
    metrics = HomeMetrics(home.path, verify_every_s=3600)

    def collect(requests: object) -> str:
        return render(metrics.families(NOW))

    server = serve_in_thread(make_app(now=lambda: NOW, metrics=collect), host="127.0.0.1", port=0)
    url = f"http://127.0.0.1:{server.port}"
    try:
        text = scrape(url)[2]
        promtool_check(text)
        before = value(text, "rensei_audit_appends_total")
        assert before is not None
        assert value(text, "rensei_enforcement_decisions_total", outcome="enforced") == 0
        with Enforcer(home, registry(), clock=lambda: STAMP) as enforcer:
            enforcer.enforce(gateway_spawn())
        text = scrape(url)[2]
        promtool_check(text)
        assert value(text, "rensei_enforcement_decisions_total", outcome="enforced") == 1
        assert value(text, "rensei_enforcement_decisions_total", outcome="held") == 0
        assert value(text, "rensei_audit_appends_total") == before + 1
    finally:
        metrics.wait_verified()
        server.stop()
