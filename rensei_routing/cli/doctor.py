"""``rensei doctor``: one line per health check (ok / warn / fail), exit 0 when nothing fails, 1
otherwise. The home's checks are :mod:`rensei_routing.ops.doctor`'s; this module adds the host
cache (age and trust, through ``host status``'s own reading) and the plugins (loaded, and every
hook's contributions collected, each failure named), and prints.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import PluginError
from ..ops.doctor import FAIL, OK, WARN, Check, home_checks
from ..plugins.manager import (
    plugin_commands,
    plugin_infos,
    redactor,
    seam_registry,
    snapshot_validators,
    vocabulary,
)
from ..store.home import Home
from ._clock import now
from ._output import emit, printable
from ._root import CommandError, builtin_command_names, cli, echo_json, home_option, json_option
from ._session import session
from .host import host_cache, host_status_data, snapshot_line


class DoctorFailedError(CommandError):
    """``rensei doctor`` found at least one failing check: exit 1."""

    exit_code = 1


def _host_cache(home: Path) -> Check:
    cache = host_cache(home)
    try:
        status = host_status_data(cache)
        trusted = len(cache.trusted_keys())
    except Exception as e:  # a config or key file we cannot read is a finding
        return Check(name="host cache", status=FAIL, detail=f"unreadable: {e}")
    if not status["source"]["configured"]:
        return Check(name="host cache", status=OK, detail="no snapshot source configured")
    snap = status["snapshot"]
    line = snapshot_line(status).removeprefix("Ruleset snapshot: ")
    detail = f"{line}; {trusted} trusted key(s)"
    last = status["lastFetch"] or {}
    if last and not last.get("ok"):
        detail += f"; last fetch failed: {last.get('detail')}"
    if snap is None or status.get("error") or snap["state"] in ("expired", "refused"):
        return Check(name="host cache", status=FAIL, detail=status.get("error") or detail)
    bad = snap["state"] == "degraded" or (last and not last.get("ok"))
    return Check(name="host cache", status=WARN if bad else OK, detail=detail)


def _plugins() -> list[Check]:
    try:
        pm = session().pm
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
        "commands": lambda: plugin_commands(pm, reserved=builtin_command_names()),
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


@cli.command(name="doctor", short_help="Check this host: one line per check, ok / warn / fail.")
@home_option
@json_option
def doctor(home: Path, json_: bool) -> None:
    """Check this host: home and key permissions, PRAGMA integrity_check and quick_check,
    schema version, WAL size, the audit chain against its stored checkpoints, the compiled
    snapshot, the host cache's age and trust, plugins and their hooks. One line per check
    (ok / warn / fail); exit 0 when nothing fails, 1 otherwise. Reads only."""
    checks = home_checks(Home(home), now=now())
    checks.append(_host_cache(home))
    checks.extend(_plugins())
    failed = [c for c in checks if c.status == FAIL]
    if json_:
        echo_json({"ok": not failed, "checks": [c.to_dict() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            emit(printable(f"{c.status:<4}  {c.name:<{width}}  {c.detail}"))
    if failed:
        raise DoctorFailedError(
            f"{len(failed)} check(s) failed: {', '.join(c.name for c in failed)}"
        )


__all__ = ["doctor"]
