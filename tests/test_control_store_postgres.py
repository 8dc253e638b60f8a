"""The PostgreSQL control store's own promises, on a real throwaway cluster (issue 23, part 1):
typed errors naming the database (a bad URL, an unreachable server, no psycopg), a connection
killed mid-transaction (``pg_terminate_backend`` from another connection) leaving nothing
written, one compile at a time per org (the advisory lock), a replica with another key refused,
and the CLI on a ``--store`` home."""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.errors import (
    DatabaseUnreachableError,
    DriverMissingError,
    HomeError,
    StoreError,
)
from rensei_routing.store.backends import attach_postgres
from rensei_routing.store.home import Home
from rensei_routing.store.postgres import PgControlStore

from .control_backends import EXAMPLES, ControlHome, T, control_home, policies, replica_of


@pytest.fixture
def ctl(tmp_path: Path, pg_url: str) -> ControlHome:
    return control_home(tmp_path / "home", "postgresql", pg_url)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(check: Any, what: str, ceiling_s: float = 30.0) -> Any:
    deadline = time.monotonic() + ceiling_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_unreachable_server_is_a_typed_error_naming_the_database(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    port = _free_port()
    url = f"postgresql://rensei:secret-pw@127.0.0.1:{port}/control"
    with pytest.raises(DatabaseUnreachableError) as info:
        attach_postgres(home, url)
    assert f"postgresql://rensei@127.0.0.1:{port}/control" in str(info.value)
    assert "secret-pw" not in str(info.value)
    assert home.store_url() is None  # nothing written to the config


def test_a_bad_url_is_a_typed_error_without_its_text(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init(org="acme")
    with pytest.raises(StoreError) as info:
        attach_postgres(home, "postgresql://rensei:pw@127.0.0.1:5432/db?sslmode=bogus-mode")
    assert "pw@" not in str(info.value)
    assert home.store_url() is None


def test_missing_psycopg_names_the_extra(ctl: ControlHome, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(DriverMissingError) as info:
        ctl.open()
    assert "pip install 'rensei-routing[postgres]'" in str(info.value)


def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    """An unreachable database and a URL that is not PostgreSQL: each one ``Error:`` line on
    stderr naming what is wrong (the URL without its password), nothing on stdout, exit 1, no
    traceback, and no ``[store] url`` written."""
    port = _free_port()
    home = tmp_path / "h"
    for url, says in (
        (f"postgresql://u:secret-pw@127.0.0.1:{port}/d", f"postgresql://u@127.0.0.1:{port}/d"),
        ("mysql://x", "--store must be a postgresql:// URL"),
    ):
        result = CliRunner().invoke(cli, ["init", "--home", str(home), "--store", url])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit)  # a message, not an exception
        assert result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert line.startswith("Error: ") and says in line, line
        assert "secret-pw" not in result.stderr and "Traceback" not in result.stderr
        assert not (home / "config.toml").exists()


def _terminate(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_connection_killed_mid_compile_commits_nothing(ctl: ControlHome) -> None:
    assert ctl.url is not None
    store = ctl.open()
    assert isinstance(store, PgControlStore)
    store.save_policies(policies("a"), saved_at=T)
    before = ctl.state()
    key = ctl.home.private_key()
    pid = store.backend_pid()
    assert pid is not None

    def killing_signer(message: bytes) -> bytes:
        _terminate(ctl.url or "", pid)  # inside the publishing transaction
        return key.sign(message)

    with pytest.raises(DatabaseUnreachableError) as info:
        store.compile_current(
            compiled_at=T, signing_key_id=key.public_key.key_id, sign=killing_signer
        )
    assert "nothing in flight was committed" in str(info.value)
    assert ctl.state() == before
    # the store reconnects on its next call, and the number was never used
    result = store.compile_current(
        compiled_at=T, signing_key_id=key.public_key.key_id, sign=key.sign
    )
    assert result is not None and result.snapshot.revision == 1
    assert store.backend_pid() != pid
    store.close()


def test_a_connection_killed_while_a_policy_save_waits_commits_nothing(ctl: ControlHome) -> None:
    """The save has locked its org row and inserted its revision, then waits on a table lock
    held by another connection; its backend is terminated there."""
    assert ctl.url is not None
    store = ctl.open()
    assert isinstance(store, PgControlStore)
    store.save_policies(policies("a"), saved_at=T)
    before = ctl.state()
    pid = store.backend_pid()
    failures: list[BaseException] = []

    def save() -> None:
        try:
            store.save_policies(policies("b"), saved_at=T)
        except BaseException as e:
            failures.append(e)

    with psycopg.connect(ctl.url) as blocker:
        blocker.execute("LOCK TABLE control_events IN EXCLUSIVE MODE")
        worker = threading.Thread(target=save)
        worker.start()
        with psycopg.connect(ctl.url, autocommit=True) as watch:
            _wait_for(
                lambda: watch.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                    (pid,),
                ).fetchone(),
                "the save to wait on the lock",
            )
            mid = watch.execute(
                "SELECT count(*) FROM pg_locks WHERE pid = %s AND granted", (pid,)
            ).fetchone()
            assert mid is not None and mid[0] > 0  # it holds row and table locks: mid-write
        _terminate(ctl.url, pid or 0)
        worker.join(30)
        blocker.rollback()
    assert len(failures) == 1 and isinstance(failures[0], DatabaseUnreachableError)
    assert ctl.state() == before
    assert store.save_policies(policies("c"), saved_at=T).revision == 2
    store.close()


def test_one_compile_at_a_time_per_org(ctl: ControlHome) -> None:
    assert ctl.url is not None
    store = ctl.open()
    assert isinstance(store, PgControlStore)
    store.save_policies(policies("a"), saved_at=T)
    key = ctl.home.private_key()
    done = threading.Event()

    def compile_() -> None:
        store.compile_current(compiled_at=T, signing_key_id=key.public_key.key_id, sign=key.sign)
        done.set()

    with psycopg.connect(ctl.url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(2302, hashtext('acme'))")
        worker = threading.Thread(target=compile_)
        worker.start()
        pid = _wait_for(store.backend_pid, "the compile's connection")
        with psycopg.connect(ctl.url, autocommit=True) as watch:
            _wait_for(
                lambda: watch.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'advisory'",
                    (pid,),
                ).fetchone(),
                "the compile to wait for the org's compile lock",
            )
        assert not done.is_set()
        holder.rollback()  # releases the lock
    worker.join(30)
    assert done.is_set()
    assert [s.revision for s in store.snapshot_history()] == [1]
    store.close()


def test_a_replica_with_another_key_is_refused(ctl: ControlHome, tmp_path: Path) -> None:
    assert ctl.url is not None
    other = Home(tmp_path / "other")
    other.init(org="acme")
    with pytest.raises(HomeError) as info:
        attach_postgres(other, ctl.url)
    assert "copy keys/" in str(info.value)
    assert other.store_url() is None
    replica = replica_of(ctl, tmp_path / "replica")  # the same keys: accepted
    store = replica.open()
    store.close()


def test_the_cli_on_a_postgres_home(tmp_path: Path, pg_url: str) -> None:
    runner = CliRunner()
    home = str(tmp_path / "h")

    def run(*args: str) -> Any:
        result = runner.invoke(cli, [*args, "--home", home])
        assert result.exit_code == 0, result.output
        return result

    out = run("init", "--org", "acme", "--store", pg_url).output
    assert "control data in postgresql://rensei@127.0.0.1:" in out
    run("policy", "save", str(EXAMPLES / "policies.json"))
    run("org", "load", str(EXAMPLES / "org.json"))
    run("snapshot", "compile")
    assert "acme@1" in run("snapshot", "show").output
    assert "acme@1" in run("snapshot", "history").output
    assert "\t" in run("policy", "history").output
    # nothing of it is in the home's SQLite file
    import apsw

    conn = apsw.Connection(str(Path(home) / "rensei.db"))
    try:
        for table in ("policy_revisions", "org_data", "ruleset_snapshots", "control_events"):
            assert conn.execute(f"SELECT count(*) FROM {table}").get == 0
    finally:
        conn.close()
    with psycopg.connect(pg_url) as pg:
        row = pg.execute("SELECT policy_rev, org_rev, snapshot_rev FROM control_orgs").fetchone()
    assert row == (1, 1, 1)


def test_the_control_audit_records_through_the_cli(tmp_path: Path, pg_url: str) -> None:
    runner = CliRunner()
    home = str(tmp_path / "h")
    for args in (
        ["init", "--org", "acme", "--store", pg_url],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["snapshot", "compile"],
    ):
        assert runner.invoke(cli, [*args, "--home", home]).exit_code == 0
    out = runner.invoke(cli, ["snapshot", "events", "--home", home])
    assert out.exit_code == 0, out.output
    header, *lines = [line.split("\t") for line in out.output.splitlines()]
    assert header == ["seq", "at", "kind", "revision", "content_hash"]
    assert [(line[0], line[2], line[3]) for line in lines] == [
        ("1", "policy.save", "1"),
        ("2", "snapshot.compile", "1"),
    ]
    later = runner.invoke(cli, ["snapshot", "events", "--after", "1", "--json", "--home", home])
    assert [e["kind"] for e in __import__("json").loads(later.output)] == ["snapshot.compile"]


def test_a_home_holding_control_data_is_not_pointed_at_an_empty_database(
    tmp_path: Path, pg_url: str
) -> None:
    """Its hosts hold its revisions; a new database would start below them."""
    runner = CliRunner()
    home = str(tmp_path / "h")
    for args in (["init"], ["policy", "save", str(EXAMPLES / "policies.json")]):
        assert runner.invoke(cli, [*args, "--home", home]).exit_code == 0
    config = Path(home) / "config.toml"
    result = runner.invoke(cli, ["init", "--home", home, "--store", pg_url])
    assert result.exit_code == 1
    assert "already holds control data" in result.output and "--start-after" in result.output
    assert not config.exists()
    with psycopg.connect(pg_url) as pg:
        assert pg.execute("SELECT to_regclass('control_orgs')").fetchone() == (None,)


def test_the_store_url_is_added_to_an_existing_config(tmp_path: Path, pg_url: str) -> None:
    home = Home(tmp_path / "h")
    home.init(org="acme")
    home.config_path.write_text("# mine\n[store]\nbusy_timeout = 5\n\n[other]\nx = 1\n")
    attach_postgres(home, pg_url)
    assert home.store_url() == pg_url
    assert home.connect_options().busy_timeout_ms == 5000
    text = home.config_path.read_text()
    assert text.startswith("# mine\n[store]\n") and "[other]\nx = 1" in text
    attach_postgres(home, pg_url)  # the same URL again: a no-op
    assert home.config_path.read_text() == text
    with pytest.raises(HomeError):
        home.set_store_url(pg_url + "_other")
    assert home.config_path.read_text() == text


def test_doctor_names_the_control_database(tmp_path: Path, pg_url: str) -> None:
    runner = CliRunner()
    home = str(tmp_path / "h")
    assert runner.invoke(cli, ["init", "--store", pg_url, "--home", home]).exit_code == 0
    result = runner.invoke(cli, ["doctor", "--json", "--home", home])
    checks = __import__("json").loads(result.output)["checks"]
    found = [c for c in checks if c["check"] == "control store"]
    assert found and found[0]["status"] == "ok" and "postgresql://rensei@" in found[0]["detail"]
