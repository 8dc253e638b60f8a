"""``rensei enforce ...``: arm a repository's canary on its evidence, disarm it, run the gate
alone, and show every canary. Parses, calls ``rensei_routing.enforce``, prints; holds no rule.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click

from ..control.policy_writes import resolve_actor
from ..core.enforce.gate import DEFAULT_MIN_SAMPLES, DEFAULT_WINDOW_S, PASS, GateBar
from ..enforce import arm, disarm, run_gate, status
from ..enforce.gate import GateRun, canonical_repo
from ._clock import now
from ._inputs import DURATION
from ._output import emit, note, printable
from ._root import CommandError, actor_option, cli, echo_json, home_option, json_option
from ._session import session
from ._store import home_of

_FRACTION = click.FloatRange(min=0.0, max=1.0)


@cli.group(name="enforce")
def enforce() -> None:
    """Enforcement canaries: arm a repository on its evidence, disarm, the gate, status."""


def _repo_option(f: Any) -> Any:
    return click.option(
        "--repo", required=True, metavar="OWNER/NAME", help="The canonical repository."
    )(f)


def _gate_options(f: Any) -> Any:
    """``--rev`` and the four options of the gate's bar, shared by ``gate`` and ``arm``; the
    command takes the bar they make as one ``bar: GateBar``."""

    @functools.wraps(f)
    def command(
        *,
        window: int,
        min_samples: int,
        max_refusal_rate: float,
        min_agreement: float | None,
        **kwargs: Any,
    ) -> None:
        bar = GateBar(
            window_s=window,
            min_samples=min_samples,
            max_refusal_rate=max_refusal_rate,
            min_agreement=min_agreement,
        )
        f(bar=bar, **kwargs)

    options = [
        click.option(
            "--rev",
            type=click.IntRange(min=1, max=2**53 - 1),
            default=None,
            help="The policy revision to judge (default: the current one).",
        ),
        click.option(
            "--window",
            type=DURATION,
            default=f"{DEFAULT_WINDOW_S // 86_400}d",
            show_default=True,
            help="The trailing window of shadow evidence (45s, 30m, 1h, 7d).",
        ),
        click.option(
            "--min-samples",
            type=click.IntRange(min=1),
            default=DEFAULT_MIN_SAMPLES,
            show_default=True,
            help="Fewer spawns in the window: inconclusive.",
        ),
        click.option(
            "--max-refusal-rate",
            type=_FRACTION,
            default=0.0,
            show_default=True,
            help="The largest fraction of the spawns the revision may hold or reject.",
        ),
        click.option(
            "--min-agreement",
            type=_FRACTION,
            default=None,
            help="The smallest fraction of the spawns that must keep their legacy route.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _verdict_line(run: GateRun) -> str:
    failed = f" ({', '.join(run.verdict.failed)})" if run.verdict.failed else ""
    fig = run.figures
    where = "not recorded" if run.seq is None else f"audit record {run.seq}"
    return (
        f"gate {run.repo} revision {run.revision}: {run.verdict.verdict}{failed}: "
        f"{fig.samples:,} spawns, {fig.refusals:,} refused, {fig.agreed:,} agreed; {where}"
    )


@enforce.command(name="gate")
@_repo_option
@_gate_options
@actor_option
@home_option
@json_option
def enforce_gate(
    repo: str, rev: int | None, bar: GateBar, actor: str | None, home: Path, json_: bool
) -> None:
    """Run the evidence gate alone for --repo and append its verdict (exit 1 unless it
    passes). The shadow evidence of the repository on the gateway in --window is resolved
    under the revision (--rev, else the current one) and counted against the bar."""
    key = canonical_repo(repo)
    who = resolve_actor(actor, redactor=session().redactor())
    run = run_gate(
        home_of(home),
        key,
        now=now(),
        actor=who,
        bar=bar,
        revision=rev,
        vocabulary=session().vocabulary(),
        redactor=session().redactor(),
    )
    if json_:
        echo_json(run.to_dict())
    else:
        emit(printable(_verdict_line(run)))
    if run.seq is None:
        raise CommandError(
            "evidence-unreadable: the audit chain does not verify (rensei audit verify); "
            "no verdict was recorded"
        )
    if run.verdict.verdict != PASS:
        raise CommandError(f"gate-{run.verdict.verdict}: {key} would not be armed")


@enforce.command(name="arm")
@_repo_option
@_gate_options
@click.option(
    "--trip-rate",
    type=click.FloatRange(min=0.0, max=1.0, max_open=True),
    default=None,
    help="Disarm the canary when its refusals exceed this fraction of its decisions.",
)
@click.option(
    "--trip-window",
    type=DURATION,
    default=None,
    help="The trailing window of the trip rate (default 1h).",
)
@click.option("--override", is_flag=True, help="Arm even if the gate does not pass.")
@click.option("--reason", default=None, metavar="TEXT", help="Why the gate is overridden.")
@actor_option
@home_option
@json_option
def enforce_arm(
    repo: str,
    rev: int | None,
    bar: GateBar,
    trip_rate: float | None,
    trip_window: int | None,
    override: bool,
    reason: str | None,
    actor: str | None,
    home: Path,
    json_: bool,
) -> None:
    """Arm --repo's canary on the gateway: run the gate (its verdict is recorded either way)
    and arm only on pass, or with --override --reason TEXT. Arming an armed repository
    gates again and moves its pin to the revision judged. Nothing else is written on a
    refusal."""
    armed = arm(
        home_of(home),
        canonical_repo(repo),
        now=now(),
        actor=resolve_actor(actor, redactor=session().redactor()),
        bar=bar,
        revision=rev,
        trip_rate=trip_rate,
        trip_window_s=trip_window,
        override=override,
        reason=reason,
        vocabulary=session().vocabulary(),
        redactor=session().redactor(),
    )
    if json_:
        echo_json(armed.to_dict())
        return
    c = armed.canary
    moved = "" if armed.prior_revision is None else f" (pin moved from {armed.prior_revision})"
    how = "override" if c.override else "gate pass"
    emit(printable(_verdict_line(armed.gate)))
    emit(
        printable(
            f"armed {c.repo} on revision {c.revision}{moved}: {how}, by {c.actor}; "
            f"audit record {c.arm_seq}"
        )
    )


@enforce.command(name="disarm")
@_repo_option
@actor_option
@home_option
@json_option
def enforce_disarm(repo: str, actor: str | None, home: Path, json_: bool) -> None:
    """Disarm --repo's canary: from the next call its spawns run exactly as if it had never
    been armed. One action, recorded with its actor."""
    key = canonical_repo(repo)
    who = resolve_actor(actor, redactor=session().redactor())
    was = disarm(home_of(home), key, now=now(), actor=who, redactor=session().redactor())
    if json_:
        echo_json({"disarmed": was.repo, "revision": was.revision, "actor": who})
        return
    emit(printable(f"disarmed {was.repo} (was enforcing revision {was.revision}), by {who}"))


@enforce.command(name="status")
@home_option
@json_option
def enforce_status(home: Path, json_: bool) -> None:
    """Every canary ever armed: armed, tripped (and why) or disarmed, its pinned revision and
    whether the current revision is ahead of it, its decisions and refusals in its window."""
    data = status(home_of(home), now=now(), vocabulary=session().vocabulary())
    if json_:
        echo_json(data)
        return
    if not data["canaries"]:
        emit("nothing armed (no canary was ever armed in this home)")
        return
    for c in data["canaries"]:
        line = f"{c['repo']}: {c['state']}, revision {c['pinned_revision']}"
        if c["ahead"]:
            line += f" (current revision {c['current_revision']} is ahead: arm again to gate it)"
        if c["state"] == "tripped":
            line += f", tripped: {c['trip_reason']}"
        w = c["window"]
        line += f"; last {w['seconds']}s: {w['decisions']:,} decisions, {w['refusals']:,} refused"
        emit(printable(line))
    if not data["armed"]:
        note("note: nothing is armed")
