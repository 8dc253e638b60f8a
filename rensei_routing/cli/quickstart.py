"""``rensei quickstart``: the whole main job in one run, on a fresh home, with the shipped examples.

Owns the order of the steps and what a new user is shown; holds no mechanism of its own: every
step calls the function the individual command uses (``init``, ``org load``, ``policy save``,
``snapshot compile``, ``serve``, ``host trust``/``sync``, ``shadow record``, ``policy whatif``,
``audit checkpoint``, ``audit verify``), so the quickstart cannot drift from the commands.

The home is recreated on every run: a home this command created carries a marker file and is
removed first; any other non-empty directory is refused, so a real home is never wiped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import click

from ..control.server import make_app, serve_in_thread
from ..control.snapshots import compile_snapshot, ensure_serve_token, serve_token_path
from ..core.routing.validation import validate_policies
from ..core.shadow.report import ShadowReport
from ..core.snapshot.org import OrgData
from ..errors import InputError, UnknownSeamError
from ..host.cache import HostConfig
from ..plugins.manager import snapshot_validators
from ..shadow.whatif import compare_chain
from ..store.home import Home
from ..store.snapshots import OrgStore
from ._clock import now, now_text
from ._inputs import _named, read_document, read_verified_policy_file
from ._output import emit, printable
from ._root import CommandError, cli
from ._session import session
from ._store import collector_paused, now_rfc3339, open_audit_log, open_policy_store
from .audit import verdict_line
from .host import host_cache, host_status_data, poll_once, snapshot_line, snapshot_service
from .shadow import read_spawn_lines, record_spawns, render_report
from .whatif import render_summary

DEFAULT_QUICKSTART_HOME: Final = ".rensei-quickstart"
QUICKSTART_ORG: Final = "quickstart"
MARKER: Final = ".rensei-quickstart"
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
    shadow: list[str] = field(default_factory=list)
    whatif: list[str] = field(default_factory=list)
    verify: str = ""
    verified: bool = False
    replayed: bool = False


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


def fresh_home(path: Path) -> Home:
    """Remove a previous quickstart home at ``path`` and initialise a new one (with its marker).

    Raises:
        InputError: ``path`` holds something that is not a quickstart home.
        HomeError, StoreError: the home cannot be created.
    """
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{path} exists and is not a directory")
        if any(path.iterdir()):
            if not (path / MARKER).is_file():
                raise InputError(
                    f"{path} is not empty and was not made by `rensei quickstart`; "
                    "choose another --home (the quickstart recreates its home)"
                )
            shutil.rmtree(path)
    # the marker first, so a run interrupted during init leaves a home the next run may recreate
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    (path / MARKER).write_text("made by `rensei quickstart`; recreated on every run\n")
    home = Home(path)
    home.init(org=QUICKSTART_ORG)
    return home


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
    with closing(home.connect(write=True)) as conn:
        org_rev = OrgStore(conn).save(org, saved_at=now_rfc3339())
    policies = read_verified_policy_file(POLICIES_FILE, vocabulary=session().vocabulary())
    with open_policy_store(home.path, write=True) as store:
        saved = store.save(policies.policies, saved_at=now_rfc3339())
    out.lines.append(
        f"loaded org data revision {org_rev} and policy revision {saved.revision} "
        f"({len(saved.policies)} policies)"
    )


def _compile_serve_sync(home: Home, out: _Outcome) -> None:
    ctx = session()
    compiled = compile_snapshot(
        home,
        compiled_at=now_text(),
        validators=snapshot_validators(ctx.pm),
        vocabulary=ctx.vocabulary(),
    ).snapshot
    token = ensure_serve_token(home)
    app = make_app(now=now, token=token, service=snapshot_service(home))
    server = serve_in_thread(app, host="127.0.0.1", port=0)
    try:
        endpoint = f"http://127.0.0.1:{server.port}"
        cache = host_cache(home.path)
        cache.trust(home.public_key())
        config = HostConfig(
            **{
                **cache.config().to_dict(),
                "endpoint": endpoint,
                "token_file": str(serve_token_path(home).resolve()),
                "source_file": None,
            }
        )
        cache.save_config(config)
        synced = poll_once(cache, config)
    finally:
        server.stop()
    out.lines.append(f"compiled and signed {compiled.ruleset_rev}; served on {endpoint}: {synced}")
    out.snapshot_line = snapshot_line(host_status_data(cache))


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
    first, last, _ = record_spawns(home, registry, items, report=report, label="shadow replay")
    out.shadow = [
        f"Shadow agreement by mechanism ({report.total.spawns:,} sample spawns replayed through "
        f"the {SEAM_PLUGIN} seams, seqs {first}..{last}):",
        *render_report("mechanism", report.rows(), report.total).splitlines(),
    ]


def _whatif(home: Home, out: _Outcome) -> None:
    vocabulary = session().vocabulary()
    proposed = read_verified_policy_file(CANDIDATE_FILE, vocabulary=vocabulary)
    issues = validate_policies(proposed.policies, vocabulary=vocabulary)
    if issues:  # a shipped file: a bug, said plainly
        raise CommandError(f"{len(issues)} validation issue(s) in {CANDIDATE_FILE}")
    with open_policy_store(home.path, write=False) as store, collector_paused():
        loaded = store.load()
    with open_audit_log(home.path) as log:
        summary = compare_chain(
            log, (loaded.snapshot, loaded.state), proposed, examples=1, vocabulary=vocabulary
        )
    if not summary.contexts:
        out.whatif = ["What-if: no recorded contexts to replay"]
        return
    counters = render_summary(summary).split("\n\n", 1)[0]
    out.whatif = [
        f"What-if: {summary.contexts:,} recorded contexts, current revision "
        f"{loaded.snapshot.revision} -> candidate {CANDIDATE_FILE.name}:",
        *counters.splitlines(),
    ]


def _checkpoint_verify(home: Home, out: _Outcome) -> None:
    with open_audit_log(home.path) as log:
        cp = log.checkpoint()
        result = log.verify()
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
        ("shadow replay", _shadow),
        ("what-if", _whatif),
        ("checkpoint, verify", _checkpoint_verify),
    ]
    with _steps(len(steps) + 1) as step:
        step("init")
        h = fresh_home(home)
        for label, run in steps:
            step(label)
            run(h, out)
    where = shlex.quote(str(home))
    text = [
        f"rensei quickstart: fresh home {h.path.resolve()} (org {QUICKSTART_ORG})",
        *(f"  {line}" for line in out.lines),
        "",
        out.snapshot_line,
        "",
        *out.shadow,
        "",
        *out.whatif,
        "",
        out.verify,
        "",
        "Explore next:",
        f"  rensei --home {where} shadow report --by seam",
        f"  rensei --home {where} explain --snapshot " + shlex.quote(EXAMPLE_CONTEXT),
        f"  rensei --home {where} audit tail -n 3",
    ]
    emit("\n".join(printable(line) for line in text))
    if not out.verified:
        raise CommandError("quickstart: the audit chain does not verify")
    if not out.replayed:
        raise CommandError(
            f"quickstart incomplete: shadow replay needs the seam plugin {SEAM_PLUGIN} "
            f"(pip install {SEAM_PLUGIN}); every other step ran"
        )
