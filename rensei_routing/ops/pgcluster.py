"""A throwaway PostgreSQL cluster on loopback: for the PostgreSQL store's tests, the fleet
benchmark and the README's scaling walk-through, on a machine that has Debian's ``postgresql``
package (``initdb``, ``pg_ctl`` and ``postgres`` under ``/usr/lib/postgresql/<major>/bin``).

:func:`throwaway_cluster` runs ``initdb`` in a new temporary directory, starts ``postgres``
listening on ``127.0.0.1`` on a free port (and on a Unix socket inside that directory only), and
on exit stops it (``pg_ctl stop -m immediate``) and removes the directory, whatever happened
inside. PostgreSQL refuses to run as root, so as root every server command runs as the
``postgres`` system user (``runuser``), which owns the directory.

The cluster trusts local connections (``-A trust``): it is a test fixture bound to loopback,
never an operator's database. With ``durable=False`` (the default for tests) it runs with
``fsync=off``; a crash of the machine loses it, which a throwaway cluster may.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rensei_routing.errors import StoreError

__all__ = ["Cluster", "PostgresUnavailable", "find_bindir", "throwaway_cluster"]

_SEARCH = (Path("/usr/lib/postgresql"),)
_START_TIMEOUT_S = 60


class PostgresUnavailable(StoreError):
    """No PostgreSQL server binaries on this machine, or the cluster would not start."""


@dataclass(frozen=True)
class Cluster:
    """A running throwaway cluster: ``url`` is a libpq URL to its ``rensei`` database."""

    datadir: Path
    host: str
    port: int
    user: str
    dbname: str

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    def url_for(self, dbname: str) -> str:
        """A URL to another database of the same cluster."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{dbname}"


def find_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb``, or
    :class:`PostgresUnavailable` naming the package to install."""
    found: list[tuple[int, Path]] = []
    for root in _SEARCH:
        if not root.is_dir():
            continue
        for child in root.iterdir():
            if child.name.isdigit() and (child / "bin" / "initdb").is_file():
                found.append((int(child.name), child / "bin"))
    if not found:
        raise PostgresUnavailable(
            "no PostgreSQL server found under /usr/lib/postgresql "
            "(install Debian's package: apt-get install postgresql)"
        )
    return max(found)[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str], *, what: str) -> None:
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PostgresUnavailable(f"{what} failed: {(done.stderr or done.stdout).strip()[-800:]}")


@contextlib.contextmanager
def throwaway_cluster(
    *, durable: bool = False, dbname: str = "rensei", settings: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """Start a cluster in a temporary directory; stop it and remove the directory on exit."""
    bindir = find_bindir()
    root = Path(tempfile.mkdtemp(prefix="rensei-pg-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        datadir = root / "data"
        user = "rensei"
        _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(datadir),
                "-A",
                "trust",
                "-U",
                user,
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            what="initdb",
        )
        options = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(root),
            "max_connections": "300",
            "fsync": "on" if durable else "off",
            "full_page_writes": "on" if durable else "off",
            "synchronous_commit": "on" if durable else "off",
        }
        options.update(settings or {})
        cluster = _start(bindir, root, datadir, user, dbname, options)
        try:
            yield cluster
        finally:
            subprocess.run(
                _as_server_user(
                    [str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                check=False,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _start(
    bindir: Path, root: Path, datadir: Path, user: str, dbname: str, options: dict[str, str]
) -> Cluster:
    last = ""
    for _attempt in range(5):
        port = _free_port()
        flags = " ".join(f"-c {k}={v}" for k, v in options.items()) + f" -p {port}"
        done = subprocess.run(
            _as_server_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(datadir),
                    "-l",
                    str(root / "server.log"),
                    "-o",
                    flags,
                    "-w",
                    "-t",
                    str(_START_TIMEOUT_S),
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            _run(
                [str(bindir / "createdb"), "-h", str(root), "-p", str(port), "-U", user, dbname],
                what="createdb",
            )
            return Cluster(datadir=datadir, host="127.0.0.1", port=port, user=user, dbname=dbname)
        log = root / "server.log"
        last = log.read_text(errors="replace")[-800:] if log.exists() else done.stderr
        time.sleep(0.2)  # the port was taken between probe and bind: try another
    raise PostgresUnavailable(f"postgres would not start: {last.strip()}")
