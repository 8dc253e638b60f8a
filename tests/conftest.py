"""Shared fixtures: every test runs with its home and config pointed at ``tmp_path``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

#: Property tests assert behaviour, never speed: hypothesis's per-example deadline and its
#: "too slow" health check are timed assertions that fail on a loaded machine, so no test here
#: inherits them (speed is measured in ``benchmarks/``). A test may still name its own
#: ``max_examples``.
settings.register_profile("rensei", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rensei")


def pytest_configure(config: pytest.Config) -> None:
    import os

    os.environ["RENSEI_ROUTING_LOAD_PLUGINS"] = ""


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RENSEI_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@contextmanager
def read_only_view(folder: Path) -> Iterator[Path]:
    """``folder`` bind-mounted read-only (a real read-only medium, even for root); skips the
    test where this machine cannot mount."""
    view = folder.parent / (folder.name + "-ro")
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(folder), str(view)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        remount = ["mount", "-o", "remount,ro,bind", str(view)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("cannot remount read-only here")
        yield view
    finally:
        subprocess.run(["umount", str(view)], capture_output=True)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[object]:
    """One throwaway PostgreSQL cluster for the session (Debian's ``postgresql`` package, a temp
    directory, a free loopback port), stopped and removed at the end."""
    from rensei_routing.ops.pgcluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: object) -> Iterator[str]:
    """A fresh, empty database in the session's cluster for one test; dropped after it."""
    import uuid

    import psycopg

    from rensei_routing.ops.pgcluster import Cluster

    assert isinstance(pg_cluster, Cluster)
    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_cluster.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_cluster.url_for(name)
    finally:
        with psycopg.connect(pg_cluster.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
