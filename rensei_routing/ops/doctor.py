"""The health checks of one home (``rensei doctor``): file modes, SQLite integrity, schema, WAL
size, the audit chain against its stored checkpoints, the latest compiled snapshot.

Adapter: reads the home (read-only connections; it never migrates, repairs or writes) and
returns one :class:`Check` per line. Never raises for what it finds: a failure to look is a
``fail`` check naming why; also the host cache (:func:`host_cache_check`) and the plugins
(:func:`plugin_checks`). The clock and the plugin manager are the caller's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

import pluggy

from ..core.audit.note import STRICT_PAYLOADS
from ..core.snapshot.envelope import compiled_moment
from ..core.snapshot.freshness import format_age
from ..errors import PluginError, RenseiRoutingError
from ..host.cache import HostCache
from ..host.status import NO_SOURCE, host_status_data, summarise
from ..plugins.manager import (
    plugin_commands,
    plugin_infos,
    redactor,
    seam_registry,
    snapshot_validators,
    vocabulary,
)
from ..store.audit import AuditLog
from ..store.db import SCHEMA_VERSION, WAL_SIZE_LIMIT, close_quietly
from ..store.home import Home

__all__ = [
    "FAIL",
    "OK",
    "UNPINNED_WARN_RECORDS",
    "WAL_WARN_BYTES",
    "WARN",
    "Check",
    "home_checks",
    "host_cache_check",
    "is_host_only",
    "plugin_checks",
]

Status = Literal["ok", "warn", "fail"]
OK: Final = "ok"
WARN: Final = "warn"
FAIL: Final = "fail"

#: A WAL this large outlived several checkpoints: a long reader, or a writer that never ends.
WAL_WARN_BYTES: Final = 4 * WAL_SIZE_LIMIT
#: Records past the latest checkpoint that ``verify`` parses one by one (~16 µs each) before a
#: warning suggests a new checkpoint: about 1.6 s of a verify's time.
UNPINNED_WARN_RECORDS: Final = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One line of ``rensei doctor``."""

    name: str
    status: Status
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "detail": self.detail}


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _home_mode(home: Home) -> Check:
    problems = []
    mode = _mode(home.path)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        problems.append(f"{home.path} is open to group/others (mode {mode:04o}; chmod 700)")
    if home.keys_dir.is_dir():
        mode = _mode(home.keys_dir)
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            problems.append(f"{home.keys_dir} is writable by group/others (mode {mode:04o})")
    return Check(
        name="home",
        status=WARN if problems else OK,
        detail="; ".join(problems) or f"{home.path.resolve()} (mode 0700)",
    )


def _modes(home: Home) -> Iterator[Check]:
    yield _home_mode(home)
    key = home.private_key_path
    if not key.is_file():
        yield Check(name="keys", status=FAIL, detail=f"{key} is missing")
        return
    mode = _mode(key)
    try:
        public = home.private_key().public_key
        recorded = home.info().key_id
    except RenseiRoutingError as e:
        yield Check(name="keys", status=FAIL, detail=str(e))
        return
    if public.key_id != recorded:
        yield Check(name="keys", status=FAIL, detail=f"{key} is not this home's key {recorded}")
    elif mode & 0o077:
        yield Check(
            name="keys", status=FAIL, detail=f"{key} is readable by others (mode {mode:04o}; 0600)"
        )
    else:
        yield Check(name="keys", status=OK, detail=f"host key {public.key_id} (mode 0600)")
    yield _serve_token(home)


def _serve_token(home: Home) -> Check:
    """``keys/serve.token``: a warning when group or others can read it (``rensei serve``
    refuses to start with it), since whoever read it can fetch the org's snapshots."""
    token = home.keys_dir / "serve.token"
    if not token.exists():
        return Check(
            name="serve token", status=OK, detail="none (`rensei init` creates it, or `serve`)"
        )
    mode = _mode(token)
    if mode & 0o077:
        return Check(
            name="serve token",
            status=WARN,
            detail=(
                f"{token} is readable by others (mode {mode:04o}): `rensei serve` refuses it; "
                "delete it (serve makes a new one) and hand the new token to the hosts"
            ),
        )
    return Check(name="serve token", status=OK, detail=f"{token} (mode 0600)")


def _database(home: Home) -> Iterator[Check]:
    try:
        conn = home.connect()
    except RenseiRoutingError as e:
        yield Check(name="schema", status=FAIL, detail=str(e))
        return
    try:
        for pragma in ("integrity_check", "quick_check"):
            rows = [str(r[0]) for r in conn.execute(f"PRAGMA {pragma}(20)")]
            good = rows == ["ok"]
            yield Check(
                name=pragma, status=OK if good else FAIL, detail="ok" if good else "; ".join(rows)
            )
        version = int(str(conn.pragma("user_version")))
        yield Check(
            name="schema", status=OK, detail=f"version {version} (this code: {SCHEMA_VERSION})"
        )
    except Exception as e:  # apsw.Error: a damaged file
        yield Check(name="integrity_check", status=FAIL, detail=f"cannot check: {e}")
    finally:
        close_quietly(conn)
    wal = Path(f"{home.db_path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    yield Check(
        name="wal",
        status=WARN if size > WAL_WARN_BYTES else OK,
        detail=f"{size:,} bytes"
        + (
            f" (over {WAL_WARN_BYTES:,}: a long reader or an unfinished writer holds it; it "
            "shrinks at the next checkpoint once they finish)"
            if size > WAL_WARN_BYTES
            else f" (bounded at {WAL_SIZE_LIMIT:,} after each checkpoint)"
        ),
    )


def _chain(home: Home) -> Check:
    try:
        with AuditLog.open(home, read_only=True) as log:
            chain = log.verify_segments()
            result = chain.result
            strict = [cp.size for cp in log.checkpoints() if STRICT_PAYLOADS in cp.extensions]
    except RenseiRoutingError as e:
        return Check(name="audit chain", status=FAIL, detail=f"could not verify: {e}")
    if not result:
        return Check(
            name="audit chain",
            status=FAIL,
            detail=f"broken at seq {result.first_broken_seq}: {result.reason}: {result.detail}",
        )
    # the records present: after a prune, fewer than the next seq
    detail = f"{chain.records:,} records, {result.checkpoints_checked} checkpoint(s)"
    if chain.records and not result.checkpoints_checked:
        return Check(
            name="audit chain",
            status=WARN,
            detail=f"{detail}: no checkpoint yet (rensei audit checkpoint -o FILE, off the host)",
        )
    # verify parses every record past the latest checkpoint that says its signer parsed them
    unpinned = result.records_checked - max(strict, default=0)
    if unpinned > UNPINNED_WARN_RECORDS or (chain.records and not strict):
        return Check(
            name="audit chain",
            status=WARN,
            detail=f"{detail}: {unpinned:,} records past the latest checkpoint"
            + ("" if strict else " of this version")
            + ", which verify parses one by one (rensei audit checkpoint pins them)",
        )
    return Check(name="audit chain", status=OK, detail=detail)


def _snapshot(home: Home, now: datetime) -> Check:
    from ..control.snapshots import latest_snapshot

    try:
        snap = latest_snapshot(home)
    except RenseiRoutingError as e:
        return Check(name="snapshot", status=FAIL, detail=f"latest snapshot unusable: {e}")
    if snap is None:
        return Check(name="snapshot", status=OK, detail="none compiled (control side unused)")
    age = format_age(max(0, int((now - compiled_moment(snap)).total_seconds() * 1000)))
    return Check(
        name="snapshot",
        status=OK,
        detail=f"{snap.ruleset_rev} compiled {age} ago, signed by this home's key",
    )


def is_host_only(home: Home) -> bool:
    """Whether ``home`` is a host-only home: no database (never ``rensei init``), but a host
    cache (``host trust`` / ``host sync`` made ``<home>/host``). Such a home holds no store, no
    key and no audit log, so only the home's mode and the host cache are checked."""
    return (
        not home.db_path.exists()
        and not home.db_path.is_symlink()
        and (home.path / "host").is_dir()
    )


def _control_store(home: Home) -> Iterator[Check]:
    """A home whose control data is in PostgreSQL: whether the database answers (a SQLite home
    has no such line: its file is the database check's)."""
    from ..store.backends import open_control_store

    try:
        if home.store_url() is None:
            return
        store = open_control_store(home)
    except RenseiRoutingError as e:
        yield Check(name="control store", status=FAIL, detail=str(e))
        return
    try:
        policy, org = store.source_revisions()
        mark = store.latest_mark()
    except RenseiRoutingError as e:
        yield Check(name="control store", status=FAIL, detail=str(e))
        return
    finally:
        store.close()
    yield Check(
        name="control store",
        status=OK,
        detail=f"{store.where}: policy revision {policy}, org data revision {org}, snapshot "
        f"revision {0 if mark is None else mark[0]}",
    )


def home_checks(home: Home, *, now: datetime) -> list[Check]:
    """Every check of ``home`` that applies: a host-only home (:func:`is_host_only`) gets its
    mode and one ``store`` line saying the control side's checks do not apply; a home that is
    neither initialised nor host-only is one ``fail``."""
    if is_host_only(home):
        return [
            _home_mode(home),
            Check(
                name="store",
                status=OK,
                detail="none: a host-only home (host trust + host sync, no init); the store, "
                "key, audit chain and snapshot checks do not apply",
            ),
        ]
    try:
        home.info()
    except RenseiRoutingError as e:
        return [Check(name="home", status=FAIL, detail=str(e))]
    checks: list[Check] = []
    steps: tuple[Callable[[], Iterator[Check] | Check], ...] = (
        lambda: _modes(home),
        lambda: _database(home),
        lambda: _chain(home),
        lambda: _control_store(home),
        lambda: _snapshot(home, now),
    )
    for step in steps:
        found = step()
        checks.extend([found] if isinstance(found, Check) else found)
    return checks


def host_cache_check(cache: HostCache, *, now: datetime) -> Check:
    """The host cache at ``now`` (:func:`~rensei_routing.host.status.summarise`, as ``host
    status`` reads it): its snapshot's state, trusted keys, the last fetch, and a missing
    source beside a held snapshot."""
    try:
        status = host_status_data(cache, now=now)
        trusted = len(cache.trusted_keys())
    except Exception as e:  # a config or key file we cannot read is a finding
        return Check(name="host cache", status=FAIL, detail=f"unreadable: {e}")
    summary = summarise(status)
    if summary.state == "none" and not summary.configured:  # a home that is no host
        return Check(name="host cache", status=OK, detail=f"{summary.missing}")
    detail = f"{summary.line.removeprefix('Ruleset snapshot: ')}; {trusted} trusted key(s)"
    last = status["lastFetch"] or {}
    if last and not last.get("ok"):
        detail += f"; last fetch failed: {last.get('detail')}"
    if not summary.configured:
        detail += f"; {NO_SOURCE}: nothing renews it"
    if not summary.usable:
        return Check(name="host cache", status=FAIL, detail=status.get("error") or detail)
    bad = summary.state == "degraded" or (last and not last.get("ok"))
    return Check(name="host cache", status=WARN if bad else OK, detail=detail)


def plugin_checks(
    load: Callable[[], pluggy.PluginManager], *, reserved: Collection[str]
) -> list[Check]:
    """The installed plugins (``load()`` builds the manager) and whether each hook's
    contributions collect without error; ``reserved`` are the built-in command names."""
    try:
        pm = load()
    except PluginError as e:
        return [Check(name="plugins", status=FAIL, detail=str(e))]
    infos = [i for i in plugin_infos(pm) if not i.builtin]
    names = ", ".join(f"{i.name} {i.version or ''}".strip() for i in infos) or "none installed"
    checks = [Check(name="plugins", status=OK, detail=f"loaded: {names}")]
    hooks: dict[str, Callable[[], object]] = {
        "vocabulary": lambda: vocabulary(pm),
        "seams": lambda: seam_registry(pm),
        "redaction": lambda: redactor(pm),
        "validators": lambda: snapshot_validators(pm),
        "commands": lambda: plugin_commands(pm, reserved=reserved),
    }
    errors = []
    for hook, collect in hooks.items():
        try:
            collect()
        except PluginError as e:
            errors.append(f"{hook}: {e}")
    checks.append(
        Check(
            name="plugin hooks",
            status=FAIL if errors else OK,
            detail="; ".join(errors) or f"{', '.join(hooks)} collected without error",
        )
    )
    return checks
