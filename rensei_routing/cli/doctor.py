"""``rensei doctor``: one line per health check (ok / warn / fail), exit 0 when nothing fails, 1
otherwise. The checks (the home's, the host cache's, the plugins') are
:mod:`rensei_routing.ops.doctor`'s; this module gives them the clock and the plugin session, and
prints.
"""

from __future__ import annotations

from pathlib import Path

from ..host.cache import host_cache
from ..ops.doctor import FAIL, home_checks, host_cache_check, plugin_checks
from ._clock import now
from ._output import emit, printable
from ._root import CommandError, builtin_command_names, cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of


class DoctorFailedError(CommandError):
    """``rensei doctor`` found at least one failing check: exit 1."""

    exit_code = 1


@cli.command(name="doctor", short_help="Check this host: one line per check, ok / warn / fail.")
@home_option
@json_option
def doctor(home: Path, json_: bool) -> None:
    """Check this host: home and key permissions, PRAGMA integrity_check and quick_check,
    schema version, WAL size, the audit chain against its stored checkpoints, the compiled
    snapshot, the host cache's age and trust, plugins and their hooks. One line per check
    (ok / warn / fail); exit 0 when nothing fails, 1 otherwise. Reads only."""
    moment = now()
    checks = home_checks(home_of(home), now=moment)
    checks.append(host_cache_check(host_cache(home), now=moment))
    checks.extend(plugin_checks(lambda: session().pm, reserved=builtin_command_names()))
    failed = [c for c in checks if c.status == FAIL]
    if json_:
        echo_json({"ok": not failed, "checks": [c.to_dict() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            emit(printable(f"{c.status:<4}  {c.name:<{width}}  {c.detail}"))
    if failed:
        raise DoctorFailedError(
            f"{len(failed):,} check(s) failed: {', '.join(c.name for c in failed)}"
        )


__all__ = ["doctor"]
