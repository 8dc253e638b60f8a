"""`rensei ui` in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by selenium against `rensei ui` started as a real process on a quickstart home. Each page
is loaded; the numbers in its DOM are checked against the CLI's own figures (`shadow report`,
`policy whatif`, the stored records), links are followed to where they say they lead, the
browser's console must stay free of errors, and a tampered chain must show as broken (never as
fine). A screenshot of each page is saved as an artifact: under $RENSEI_ARTIFACTS when set,
else under pytest's temporary directory.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import apsw
import pytest

from rensei_routing.core.shadow.compare import stored_actual
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .console_support import running_ui, wait_for
from .shadow_support import home_with_policies, installed_seams, registry, spawn

#: Fixtures used by name (the fleet test records HydraFlow spawns in-process).
_FIXTURES = (installed_seams,)

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SAMPLES = Path(__file__).resolve().parent.parent / "plugins" / "rensei-seams-hydraflow" / "samples"

if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    if os.environ.get("CI") == "true":  # .ci/run installs them: missing there is a failure
        raise RuntimeError("chromium and chromium-driver are missing (see .ci/run)")
    pytest.skip("Debian's chromium and chromium-driver are not installed", allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

#: The tests' environment with installed plugins loaded (the suite's conftest turns them off):
#: the quickstart replays HydraFlow's spawns through the reference seam plugin.
PLUGINS_ON = {k: v for k, v in os.environ.items() if k != "RENSEI_ROUTING_LOAD_PLUGINS"}

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _rensei(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "rensei_routing.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=PLUGINS_ON,
    )
    assert out.returncode == 0, (args, out.stderr)
    return json.loads(out.stdout) if "--json" in args else out.stdout


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("RENSEI_ARTIFACTS")
    path = Path(where) if where else tmp_path_factory.mktemp("console-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qs") / "home"
    _rensei("quickstart", "--home", str(path))
    return path


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="rensei-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1280,1400")
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield d
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def ui(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    whatif = tmp_path_factory.mktemp("whatif")
    shutil.copy(SAMPLES / "candidate-policies.json", whatif / "candidate.json")
    log = tmp_path_factory.mktemp("log") / "ui.log"
    with running_ui(home, log, "--whatif-dir", str(whatif), env=PLUGINS_ON) as base:
        yield base


def visit(driver: Any, url: str, shot: Path | None = None) -> None:
    """Load ``url``; the browser's console must stay free of errors and warnings."""
    driver.get(url)
    if shot is not None:
        driver.save_screenshot(str(shot))
    logs = [e for e in driver.get_log("browser") if e.get("level") in ("SEVERE", "WARNING")]
    assert logs == [], logs


def follow(driver: Any, element: Any) -> None:
    """Click ``element`` (a link or a submit button) and wait until the page it navigates to
    has replaced the current one and loaded, so nothing is read from the page being replaced
    (a stale element)."""
    before = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 60).until(staleness_of(before))
    wait_for(
        lambda: driver.execute_script("return document.readyState") == "complete", "a page load"
    )


def text(driver: Any, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def cells(driver: Any, table_id: str) -> list[list[str]]:
    rows = driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
    return [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]


def _num(s: str) -> int:
    return int(s.replace(",", ""))


#: The tag the shadow tables put beside a lossy repo slug (legacy-lossy identity).
LOSSY = " lossy slug"


def _group(cell: str) -> str:
    """A group cell's name (without the lossy tag)."""
    return cell.removesuffix(LOSSY)


def test_overview_shows_the_home_and_its_verified_chain(
    driver: Any, ui: str, home: Path, artifacts: Path
) -> None:
    def verified() -> bool:
        visit(driver, ui + "/")
        return text(driver, "#chain-status") == "ok" and bool(driver.find_elements(By.ID, "doctor"))

    wait_for(verified, "the overview to show a verified chain and doctor's checks")
    visit(driver, ui + "/", artifacts / "overview.png")
    with AuditLog.open(Home(home)) as log:
        count = log.count()
    assert text(driver, "#org") == "quickstart"
    assert _num(text(driver, "#chain-records")) == count
    assert f"{count:,} record(s) verified" in text(driver, "#chain-detail")
    assert text(driver, "#policy-revision") == "1"
    assert text(driver, "#snapshot-state") in ("fresh", "degraded")
    doctor = {row[0]: row[1] for row in cells(driver, "doctor")}
    assert doctor["audit chain"] == "ok" and doctor["schema"] == "ok"


def test_shadow_figures_are_shadow_reports(
    driver: Any, ui: str, home: Path, artifacts: Path
) -> None:
    visit(driver, ui + "/shadow", artifacts / "shadow.png")
    total = _rensei("--home", str(home), "shadow", "report", "--json")["total"]
    shown = {row[0]: row[1] for row in cells(driver, "totals")}
    assert _num(shown["spawns"]) == total["spawns"]
    assert _num(shown["agreed"]) == total["agreed"]
    assert shown["agreement"] == f"{total['agreement_rate'] * 100:.1f}%"
    for kind in ("provider", "model", "provider-and-model", "not-selected"):
        assert _num(shown[kind]) == total["divergence"][kind]
    assert shown["direct-HTTP share"] == f"{total['direct_http_share'] * 100:.1f}%"
    assert _num(shown["held"]) == total["held"] and _num(shown["rejected"]) == total["rejected"]
    for by in ("repo", "role", "mechanism", "seam", "transport"):
        groups = _rensei("--home", str(home), "shadow", "report", "--by", by, "--json")["groups"]
        rows = cells(driver, f"table-{by}")
        assert [(_group(r[0]), _num(r[1]), _num(r[2])) for r in rows] == [
            (g["group"], g["spawns"], g["agreed"]) for g in groups
        ]
        assert driver.find_elements(By.CSS_SELECTOR, f"#by-{by} svg rect")  # the chart
    daily = cells(driver, "table-daily")
    assert sum(_num(r[1]) for r in daily) == total["spawns"]


def test_filters_narrow_the_figures(driver: Any, ui: str, home: Path, tmp_path: Path) -> None:
    groups = _rensei("--home", str(home), "shadow", "report", "--by", "repo", "--json")["groups"]
    repo = groups[0]["group"]
    visit(driver, ui + "/shadow")
    driver.find_element(By.CSS_SELECTOR, f"#f-repo option[value='{repo}']").click()
    follow(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert f"repo={quote_plus(repo)}" in driver.current_url
    shown = {row[0]: row[1] for row in cells(driver, "totals")}
    assert _num(shown["spawns"]) == groups[0]["spawns"]
    # since=1m on a home whose records are 3 hours old but for 7 recorded just now
    recent = home_with_policies(tmp_path)
    now = dt.datetime.now(dt.UTC)
    for when, rounds in ((now - dt.timedelta(hours=3), 8), (now, 1)):
        stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        with ShadowRecorder(recent, registry(), clock=lambda s=stamp: s) as rec:
            for _ in range(rounds):
                rec.record_many(
                    [Spawn.from_dict(spawn(principal_id=p)) for p in ("planner", "reviewer")]
                    + [Spawn.from_dict(spawn())] * (5 if when == now else 3)
                )
    with running_ui(recent.path, tmp_path / "ui.log") as base:
        visit(driver, base + "/shadow")
        every = _num({r[0]: r[1] for r in cells(driver, "totals")}["spawns"])
        visit(driver, base + "/shadow?since=1m")
        last_minute = _num({r[0]: r[1] for r in cells(driver, "totals")}["spawns"])
    assert every == 8 * 5 + 7
    assert last_minute == 7
    cli = _rensei("--home", str(recent.path), "shadow", "report", "--since", "1m", "--json")
    assert cli["total"]["spawns"] == 7


def test_a_bar_leads_to_its_records_and_a_record_to_its_decision(
    driver: Any, ui: str, home: Path, artifacts: Path
) -> None:
    visit(driver, ui + "/shadow")
    first = driver.find_elements(By.CSS_SELECTOR, "#table-repo tbody tr")[0]
    repo = first.find_elements(By.TAG_NAME, "td")[0].text
    agreed_link = first.find_elements(By.TAG_NAME, "td")[2].find_element(By.TAG_NAME, "a")
    agreed = _num(agreed_link.text)
    follow(driver, agreed_link)
    driver.save_screenshot(str(artifacts / "divergences.png"))
    assert _num(text(driver, "#match-count")) == agreed
    rows = cells(driver, "records")
    assert rows and len(rows) == min(agreed, 50)
    fields = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#records thead th")]
    for row in rows:
        record = dict(zip(fields, row, strict=True))
        assert record["repo"] == repo and record["divergence"] == "none"
    seen = [_num(r[0]) for r in rows]
    if agreed > 50:
        follow(driver, driver.find_element(By.CSS_SELECTOR, "a.older"))
        older = [_num(r[0]) for r in cells(driver, "records")]
        assert older and max(older) < min(seen)
        driver.back()
    seq = seen[0]
    follow(driver, driver.find_element(By.LINK_TEXT, str(seq)))
    assert driver.current_url.endswith(f"/decision/{seq}")
    driver.save_screenshot(str(artifacts / "decision.png"))
    assert not driver.get_log("browser")
    with AuditLog.open(Home(home)) as log:
        payload = log.get(seq).payload
    assert text(driver, "#decision-id") == payload["proposed"]["decision_id"]
    explanation = text(driver, "#explanation")
    assert explanation.startswith(f"{payload['proposed']['outcome']}: ")
    assert payload["proposed"]["decision_id"] in explanation
    legacy = {r[0]: r[1] for r in cells(driver, "legacy")}
    assert legacy["mechanism"].split(" ")[0] == stored_actual(payload)["mechanism"]
    assert legacy["divergence"] == "none"


def test_whatif_shows_the_move_matrix_of_policy_whatif(
    driver: Any, ui: str, home: Path, artifacts: Path
) -> None:
    visit(driver, ui + "/whatif")
    follow(driver, driver.find_element(By.LINK_TEXT, "candidate.json"))

    def done() -> bool:
        visit(driver, driver.current_url)
        return bool(driver.find_elements(By.ID, "counters"))

    wait_for(done, "the what-if comparison")
    driver.save_screenshot(str(artifacts / "whatif.png"))
    cli = _rensei(
        "--home", str(home), "policy", "whatif", str(SAMPLES / "candidate-policies.json"), "--json"
    )
    counters = {r[0]: _num(r[1]) for r in cells(driver, "counters")}
    assert counters["changed"] == cli["changed"]
    assert counters["moved provider"] == cli["moved_provider"]
    matrix_total = sum(_num(c) for row in cells(driver, "matrix") for c in row[1:] if c != ".")
    assert matrix_total == cli["contexts"]
    example = driver.find_elements(By.CSS_SELECTOR, "#counters a")
    if example:
        target = example[0].get_attribute("href")
        follow(driver, example[0])
        assert driver.current_url == target and "/decision/" in target
        assert text(driver, "#decision-id").startswith("sha256:")


def test_policies_and_audit_pages(driver: Any, ui: str, home: Path, artifacts: Path) -> None:
    visit(driver, ui + "/policies", artifacts / "policies.png")
    history = _rensei("--home", str(home), "policy", "history", "--json")
    assert len(cells(driver, "revisions")) == len(
        history if isinstance(history, list) else history["revisions"]
    )
    assert "revision" in text(driver, "#diff-title")

    def verified() -> bool:
        visit(driver, ui + "/audit")
        return text(driver, "#chain-status") == "ok"

    wait_for(verified, "the audit page to show a verified chain")
    driver.save_screenshot(str(artifacts / "audit.png"))
    checkpoints = cells(driver, "checkpoints")
    assert checkpoints and all(r[2].startswith("verified") for r in checkpoints)
    with AuditLog.open(Home(home)) as log:
        head = log.count()
    first = driver.find_elements(By.CSS_SELECTOR, "details.record")[0]
    assert first.get_attribute("id") == f"record-{head - 1}"
    follow(driver, driver.find_element(By.CSS_SELECTOR, "a.older"))
    assert (
        driver.find_elements(By.CSS_SELECTOR, "details.record")[0].get_attribute("id")
        == f"record-{head - 26}"
    )


def test_the_shadow_tables_fit_a_1400_px_screen(
    driver: Any, ui: str, home: Path, artifacts: Path
) -> None:
    """No table is cut off behind a sideways scrollbar at 1400 px (a table that does not fit
    beside its chart goes under it); the agreeing bar is labelled "agreed"; the lossy repo
    slugs of the sample are tagged and the page says why a repo can show twice."""
    driver.set_window_size(1400, 1000)
    try:
        visit(driver, ui + "/shadow", artifacts / "shadow-1400.png")
        assert driver.execute_script("return window.innerWidth") >= 1380
        boxes = driver.execute_script(
            "return Array.from(document.querySelectorAll('.scroll')).map("
            "e => [e.firstElementChild.id, e.scrollWidth - e.clientWidth])"
        )
        assert len(boxes) >= 7
        assert [b for b in boxes if b[1] > 1] == [], boxes
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 1
        legend = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#by-repo svg text.key")]
        assert legend[0] == "agreed" and "none" not in legend
        rows = [r[0] for r in cells(driver, "table-repo")]
        tagged = {_group(r) for r in rows if r.endswith(LOSSY)}
        assert tagged == {_group(r) for r in rows if "/" not in r}
        assert "tom-dotfiles" in tagged and "tom/dotfiles" not in tagged
        note = text(driver, "#lossy-note")
        assert f"lossy slug ({len(tagged)} here)" in note and "legacy-lossy" in note
    finally:
        driver.set_window_size(1280, 1400)


def test_pages_fit_a_narrow_screen(driver: Any, ui: str, artifacts: Path) -> None:
    driver.set_window_size(390, 900)
    try:
        for path in ("/", "/shadow", "/audit", "/policies"):
            visit(driver, ui + path)
            overflow = driver.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 1, (path, overflow)
        driver.save_screenshot(str(artifacts / "shadow-narrow.png"))
    finally:
        driver.set_window_size(1280, 1400)


def test_a_tampered_chain_shows_as_broken(
    driver: Any, home: Path, tmp_path: Path, artifacts: Path
) -> None:
    copy = tmp_path / "tampered"
    _rensei("--home", str(home), "backup", str(copy))
    conn = apsw.Connection(str(copy / "rensei.db"))
    try:
        row = conn.execute("SELECT seq, recorded_at FROM audit_records WHERE seq = 7").fetchone()
        conn.execute(
            "UPDATE audit_records SET recorded_at = ? WHERE seq = 7",
            (str(row[1]).replace("Z", "1Z") if "." in str(row[1]) else "2020-01-01T00:00:00Z",),
        )
    finally:
        conn.close()
    states: list[str] = []
    with running_ui(copy, tmp_path / "ui.log", env=PLUGINS_ON) as base:

        def broken() -> bool:
            visit(driver, base + "/")
            states.append(text(driver, "#chain-status"))
            return states[-1] == "fail"

        wait_for(broken, "the overview to show the tampered chain as broken")
        driver.save_screenshot(str(artifacts / "tampered-overview.png"))
        assert "BROKEN" in text(driver, "#chain-detail")
        assert "seq 7" in text(driver, "#chain-detail")
        visit(driver, base + "/audit", artifacts / "tampered-audit.png")
        assert text(driver, "#chain-status") == "fail"
        assert all(not r[2].startswith("verified") for r in cells(driver, "checkpoints"))
        visit(driver, base + "/shadow")
        assert "BROKEN" in text(driver, "#chain-banner")
    assert "ok" not in states  # never shown as fine, not even before the verdict


@pytest.mark.usefixtures("installed_seams")
def test_the_fleet_page_shows_the_fleet_report_and_a_fork(
    driver: Any, home: Path, tmp_path: Path, pg_url: str, artifacts: Path
) -> None:
    """Issue 23's page in the console: two hosts ingested into a real PostgreSQL fleet
    database, one of which then forks; the page shows `fleet report`'s figures (from the DOM)
    and the fork as a problem, never as fine; without --fleet it says how to configure it."""
    from click.testing import CliRunner

    from rensei_routing.cli import cli

    from .test_fleet import export, ingest, make_host, ok, record, trust

    runner = CliRunner()
    hosts = {
        "host-a": make_host(runner, tmp_path, "a", 0, 12),
        "host-b": make_host(runner, tmp_path, "b", 100, 8),
    }
    for host_id, h in hosts.items():
        ok(trust(runner, pg_url, host_id, h))
        ok(ingest(runner, pg_url, export(runner, h, tmp_path / "x" / host_id)))
    reported = ok(runner.invoke(cli, ["fleet", "report", "--from", pg_url, "--json"]))
    report = json.loads(reported.output)
    with running_ui(home, tmp_path / "ui.log", "--fleet", pg_url, env=PLUGINS_ON) as base:
        visit(driver, base + "/fleet", artifacts / "fleet.png")
        assert text(driver, "#fleet-problems").startswith("2 host(s): none forked")
        totals = dict((r[0], r[1]) for r in cells(driver, "fleet-totals"))
        assert _num(totals["spawns"]) == report["total"]["spawns"] == 20
        assert _num(totals["agreed"]) == report["total"]["agreed"]
        shown = {r[0]: (_num(r[1]), r[7]) for r in cells(driver, "fleet-hosts")}
        assert shown == {"host-a": (12, "ok"), "host-b": (8, "ok")}
        for dim in ("host", "repo", "role", "mechanism", "seam"):
            rows = {r[0]: (_num(r[1]), _num(r[2])) for r in cells(driver, f"fleet-{dim}")}
            expected = {g["group"]: (g["spawns"], g["agreed"]) for g in report["groups"][dim]}
            assert rows == expected, dim
        # host-a forks: a twin of its home records another history from seq 12 on.
        twin = tmp_path / "a-twin"
        shutil.copytree(hosts["host-a"], twin)
        record(runner, hosts["host-a"], 600, 3)
        record(runner, twin, 700, 5)
        ok(ingest(runner, pg_url, export(runner, hosts["host-a"], tmp_path / "y" / "a")))
        forked = export(runner, twin, tmp_path / "z" / "a")
        assert runner.invoke(cli, ["fleet", "ingest", "--to", pg_url, str(forked)]).exit_code == 1
        visit(driver, base + "/fleet", artifacts / "fleet-forked.png")
        banner = driver.find_element(By.CSS_SELECTOR, "#fleet-problems")
        assert "fail" in banner.get_attribute("class")
        assert "host host-a FORKED at seq 12" in banner.text
        assert {r[0]: r[7] for r in cells(driver, "fleet-hosts")}["host-a"] == "forked"
        assert [(r[1], r[2], r[3]) for r in cells(driver, "fleet-alarms")] == [
            ("host-a", "fork", "12")
        ]
    with running_ui(home, tmp_path / "ui2.log", env={**PLUGINS_ON, "RENSEI_FLEET_URL": ""}) as base:
        visit(driver, base + "/fleet")
        assert "--fleet" in text(driver, "#fleet-none")
    unreachable = "postgresql://rensei@127.0.0.1:9/nothing"
    with running_ui(home, tmp_path / "ui3.log", "--fleet", unreachable, env=PLUGINS_ON) as base:
        visit(driver, base + "/fleet")
        error = driver.find_element(By.CSS_SELECTOR, "#fleet-error")
        assert "fail" in error.get_attribute("class") and "127.0.0.1:9" in error.text
