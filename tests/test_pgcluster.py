"""The throwaway PostgreSQL cluster the PostgreSQL tests stand on: a real server on loopback, a
fresh database per test, and nothing left behind."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from rensei_routing.ops.pgcluster import Cluster, PostgresUnavailable, throwaway_cluster


def test_a_fresh_database_per_test_is_real_and_empty(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("select inet_server_addr()::text").fetchone() == ("127.0.0.1/32",)
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
        conn.execute("create table t (x int)")


def test_the_session_cluster_listens_on_loopback_only(pg_cluster: Cluster) -> None:
    assert pg_cluster.host == "127.0.0.1"
    with psycopg.connect(pg_cluster.url) as conn:
        row = conn.execute("show listen_addresses").fetchone()
    assert row == ("127.0.0.1",)


def test_a_cluster_is_stopped_and_removed_on_exit_even_after_an_error() -> None:
    seen: list[Cluster] = []
    with pytest.raises(RuntimeError), throwaway_cluster() as cluster:
        seen.append(cluster)
        raise RuntimeError("inside")
    root = Path(seen[0].datadir).parent
    assert not root.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(seen[0].url, connect_timeout=2)


def test_no_server_binaries_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import rensei_routing.ops.pgcluster as pgc

    monkeypatch.setattr(pgc, "_SEARCH", (tmp_path / "nothing",))
    with (
        pytest.raises(PostgresUnavailable, match="apt-get install postgresql"),
        throwaway_cluster(),
    ):
        pass
