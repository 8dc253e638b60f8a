"""``rensei quickstart``: the whole main job in one run, on a fresh home, with the shipped examples.

Owns what a new user is shown: it reads the shipped examples with the commands' own readers and
runs :mod:`rensei_routing.ops.quickstart`'s steps, each the service its command uses (``init``,
``org load``, ``policy save``, ``snapshot compile``, ``serve``, ``host trust``/``sync``, ``shadow
record``, ``policy whatif``, ``audit checkpoint``, ``audit verify``), so the quickstart cannot
drift from the commands.

The home is recreated on every run: a home this command can prove it created (its marker and
its database record the same random id, and it holds nothing else; see
:func:`rensei_routing.ops.quickstart.fresh_home`) is removed first; any other non-empty
directory is refused, so a real home is never wiped.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import click

from ..core.routing.validation import validate_policies
from ..core.shadow.report import ShadowReport
from ..core.snapshot.freshness import format_age
from ..core.snapshot.org import OrgData
from ..errors import UnknownSeamError
from ..host.status import host_status_data, snapshot_line
from ..ops import quickstart as ops
from ..ops.quickstart import QUICKSTART_ORG
from ..plugins.manager import snapshot_validators
from ..store.home import Home
from ._clock import now
from ._inputs import (
    _named,
    read_context,
    read_document,
    read_spawn_lines,
    read_verified_policy_file,
)
from ._output import emit, printable
from ._render import render_decision, render_report, render_summary, verdict_line
from ._root import CommandError, cli
from ._session import session
from ._store import now_rfc3339, record_spawns

DEFAULT_QUICKSTART_HOME: Final = ".rensei-quickstart"
SEAM_PLUGIN: Final = "rensei-seams-hydraflow"
EXAMPLE_CONTEXT: Final = (
    '{"repo": "hydra/flow", "repo_class": "hydraflow", "principal_id": "reviewer", '
    '"accounts": [{"account_id": "zai-main", "provider_binding": "zai-harness"}]}'
)

#: The shipped inputs (package data; copies of the seam plugin's samples, kept equal by a test).
EXAMPLES: Final = Path(__file__).resolve().parent.parent / "examples"
ORG_FILE: Final = EXAMPLES / "org.json"
POLICIES_FILE: Final = EXAMPLES / "hydraflow" / "policies.json"
CANDIDATE_FILE: Final = EXAMPLES / "hydraflow" / "candidate-policies.json"
SPAWNS_FILE: Final = EXAMPLES / "hydraflow" / "hydraflow-spawns.jsonl"


@dataclass
class _Outcome:
    """What the steps found, printed at the end."""

    lines: list[str] = field(default_factory=list)
    snapshot_line: str = ""
    ages: str = ""
    shadow: list[str] = field(default_factory=list)
    whatif: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    verify: str = ""
    verified: bool = False
    replayed: bool = False


def _program() -> str:
    """How to call ``rensei`` in the lines printed to try next, so each runs as printed: the
    bare name when ``rensei`` on PATH is the program running now (an activated venv), else the
    path it was called by (``.venv/bin/rensei`` before ``. .venv/bin/activate``)."""
    called = Path(sys.argv[0])
    if called.name != "rensei" or not called.is_file():
        return "rensei"
    found = shutil.which("rensei")
    if found is not None and Path(found).resolve() == called.resolve():
        return "rensei"
    return shlex.quote(str(called))


def _quickstart_home(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    """``--home`` here, else a root ``--home`` given on the command line, else
    ``./.rensei-quickstart``; never ``RENSEI_HOME`` (the quickstart recreates its home)."""
    if value is not None:
        return value
    root = ctx.find_root()
    if root.get_parameter_source("home") == click.core.ParameterSource.COMMANDLINE:
        given = root.params.get("home")
        if isinstance(given, Path):
            return given
    return Path(DEFAULT_QUICKSTART_HOME)


@contextmanager
def _steps(count: int) -> Iterator[Callable[[str], None]]:
    """A progress bar over the steps on a terminal's stderr; nothing when stderr is piped."""
    if not sys.stderr.isatty():
        yield lambda label: None
        return
    with click.progressbar(length=count, label="quickstart", file=sys.stderr) as bar:
        started = False

        def step(label: str) -> None:
            nonlocal started
            if started:
                bar.update(1)
            started = True
            bar.label = f"quickstart: {label}"
            bar.render_progress()

        yield step
        bar.update(1)


def _init_and_load(home: Home, out: _Outcome) -> None:
    doc, label = read_document(str(ORG_FILE))
    org = _named(label, OrgData.from_dict, doc)
    vocabulary = session().vocabulary()
    policies = read_verified_policy_file(POLICIES_FILE, vocabulary=vocabulary)
    org_rev, saved = ops.load_examples(
        home, org, policies, vocabulary=vocabulary, saved_at=now_rfc3339()
    )
    out.lines.append(
        f"loaded org data revision {org_rev} and policy revision {saved.revision} "
        f"({len(saved.policies):,} policies)"
    )


def _compile_serve_sync(home: Home, out: _Outcome) -> None:
    ctx = session()
    served = ops.compile_serve_sync(
        home, clock=now, validators=snapshot_validators(ctx.pm), vocabulary=ctx.vocabulary()
    )
    out.lines.append(  # the endpoint lived for the sync only: no URL that is dead once we exit
        f"compiled and signed {served.ruleset_rev}; served it on loopback for the host's sync "
        f"(stopped since): {served.synced}"
    )
    out.snapshot_line = snapshot_line(host_status_data(served.cache, now=now()))
    config = served.cache.config()
    out.ages = (
        f"  (degraded {format_age(int(config.degraded_after_s * 1000))} and refused "
        f"{format_age(int(config.refuse_after_s * 1000))} after its compile; to renew it, run "
        "`rensei quickstart` again)"
    )


def _explain_one(home: Home, out: _Outcome) -> None:
    """The headline feature: one decision and why, as ``explain --snapshot`` prints it."""
    vocabulary = session().vocabulary()
    context = read_context(EXAMPLE_CONTEXT, vocabulary=vocabulary)
    stamped = ops.explain_cached(
        home, context, now=now(), vocabulary=vocabulary, redactor=session().redactor()
    )
    out.explained = [
        "One decision, explained against the cached snapshot (the context of the explain "
        "command under Explore next):",
        *(f"  {line}" for line in render_decision(stamped.decision, stamped.freshness).split("\n")),
    ]


def _shadow(home: Home, out: _Outcome) -> None:
    registry = session().seams()
    try:
        registry.get("agentic-runner")
    except UnknownSeamError:
        out.shadow = [
            f"shadow replay skipped: it needs the seam plugin {SEAM_PLUGIN} "
            f"(pip install {SEAM_PLUGIN}, or ./plugins/{SEAM_PLUGIN} from a checkout)"
        ]
        return
    items = read_spawn_lines(str(SPAWNS_FILE), registry, None)
    report = ShadowReport("mechanism")
    out.replayed = True
    recorded = record_spawns(home, registry, items, report=report, label="shadow replay")
    out.shadow = [
        f"Shadow agreement by mechanism ({report.total.spawns:,} sample spawns replayed through "
        f"the {SEAM_PLUGIN} seams, seqs {recorded.first_seq}..{recorded.last_seq}):",
        *render_report("mechanism", report.rows(), report.total).splitlines(),
        "(agreed: policy chose the legacy route; provider .. not-selected: each kind of "
        "disagreement; direct-http: ungoverned bypass calls no gateway policy could bind, and "
        "their share; held, rejected: what policy decided instead of selecting)",
    ]


def _whatif(home: Home, out: _Outcome) -> None:
    vocabulary = session().vocabulary()
    proposed = read_verified_policy_file(CANDIDATE_FILE, vocabulary=vocabulary)
    issues = validate_policies(proposed.policies, vocabulary=vocabulary)
    if issues:  # a shipped file: a bug, said plainly
        raise CommandError(f"{len(issues):,} validation issue(s) in {CANDIDATE_FILE}")
    current, summary = ops.what_if(
        home,
        proposed,
        name=CANDIDATE_FILE.name,
        vocabulary=vocabulary,
        redactor=session().redactor(),
    )
    if not summary.contexts:
        out.whatif = ["What-if: no recorded contexts to replay"]
        return
    counters = render_summary(summary).split("\n\n", 1)[0]
    out.whatif = [
        f"What-if: {summary.contexts:,} recorded contexts, current revision "
        f"{current.revision} -> candidate {CANDIDATE_FILE.name}:",
        *counters.splitlines(),
    ]


def _checkpoint_verify(home: Home, out: _Outcome) -> None:
    cp, result = ops.checkpoint_verify(home, redactor=session().redactor())
    out.lines.append(f"signed a checkpoint of {cp.size:,} records")
    out.verify = f"Audit verify: {verdict_line(result)}"
    out.verified = bool(result)


@cli.command(
    name="quickstart", short_help="The main job in one run, on a fresh home, from the examples."
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    callback=_quickstart_home,
    help=f"The quickstart's own home, recreated on every run (default ./{DEFAULT_QUICKSTART_HOME};"
    " RENSEI_HOME is ignored). A directory not made by quickstart is refused.",
)
def quickstart(home: Path) -> None:
    """The main job in one run on a fresh home: init, load the example org and policies,
    compile and sign a snapshot, serve it on loopback and sync the host cache, replay the
    sample spawns in shadow mode, run a what-if, checkpoint and verify."""
    out = _Outcome()
    steps: list[tuple[str, Callable[[Home, _Outcome], None]]] = [
        ("load examples", _init_and_load),
        ("compile, serve, sync", _compile_serve_sync),
        ("explain a decision", _explain_one),
        ("shadow replay", _shadow),
        ("what-if", _whatif),
        ("checkpoint, verify", _checkpoint_verify),
    ]
    with _steps(len(steps) + 1) as step:
        step("init")
        h = ops.fresh_home(home)
        for label, run in steps:
            step(label)
            run(h, out)
    where = shlex.quote(str(home))
    rensei = _program()
    text = [
        f"rensei quickstart: fresh home {h.path.resolve()} (org {QUICKSTART_ORG})",
        *(f"  {line}" for line in out.lines),
        "",
        out.snapshot_line,
        out.ages,
        "",
        *out.explained,
        "",
        *out.shadow,
        "",
        *out.whatif,
        "",
        out.verify,
        "",
        "Explore next:",
        f"  {rensei} --home {where} shadow report --by seam",
        f"  {rensei} --home {where} explain --snapshot " + shlex.quote(EXAMPLE_CONTEXT),
        f"  {rensei} --home {where} audit tail -n 3",
    ]
    emit("\n".join(printable(line) for line in text))
    if not out.verified:
        raise CommandError("quickstart: the audit chain does not verify")
    if not out.replayed:
        raise CommandError(
            f"quickstart incomplete: shadow replay needs the seam plugin {SEAM_PLUGIN} "
            f"(pip install {SEAM_PLUGIN}); every other step ran"
        )
