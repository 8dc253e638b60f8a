"""The CLI's access to a home's store: open it, read the current snapshot, record decisions.
The store is read with the invocation's plugin vocabulary and written with its redactor, and
``decision_recorded`` observers hear about each record after it is committed."""

from __future__ import annotations

import datetime as dt
import gc
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..core.redact import DEFAULT_REDACTOR
from ..core.routing.decision import STATE_ABSENT, RouteDecision
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import Trace
from ..core.snapshot.freshness import StampedDecision
from ..errors import HomeError, InputError, PartialRecordError
from ..files import PendingWrite, missing_output_dir
from ..store.backends import open_control_store
from ..store.control import ControlStore
from ..store.home import Home
from ._output import next_step, note
from ._root import CommandError
from ._session import session

if TYPE_CHECKING:  # the shadow recorder, the audit log and the plugin manager: where used
    from ..core.audit.chain import AuditRecord
    from ..core.shadow.report import ShadowReport
    from ..core.shadow.spawn import Spawn
    from ..plugins.manager import SeamRegistry
    from ..shadow.batch import Recorded
    from ..store.audit import AuditLog

_HOMES = "rensei_routing.homes"


def home_of(path: Path) -> Home:
    """The invocation's one :class:`Home` for ``path`` (so a command reads a home's metadata
    once, whichever helpers and services it goes through); a fresh one outside a command."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return Home(path)
    homes: dict[Path, Home] = ctx.find_root().meta.setdefault(_HOMES, {})
    key = Path(path)
    if key not in homes:
        homes[key] = Home(key)
    return homes[key]


def now_rfc3339() -> str:
    """The current UTC time, RFC 3339 with microseconds (the CLI is the layer that reads clocks)."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic collector off for a bulk build of acyclic values (a revision's policies),
    then as it was. The CLI is an edge, and its process runs one command: reading 10,000
    policies builds ~300,000 objects, and the collections they set off took two thirds of the
    load (1.10 s -> 0.35 s; ``python -m benchmarks --only policy-revisions`` measures the
    library's load, which leaves the collector alone)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def open_policy_store(home: Path, *, write: bool) -> Iterator[ControlStore]:
    """The home's control store (its SQLite database, or the PostgreSQL database its
    ``[store] url`` names), read with the invocation's vocabulary, closed on exit.

    Raises:
        HomeError: the home is not initialised (``rensei init``).
        StoreError: the database cannot be opened.
    """
    s = session()
    store = open_control_store(
        home_of(home),
        write=write,
        vocabulary=s.vocabulary(),
        redactor=s.redactor() if write else DEFAULT_REDACTOR,
    )
    try:
        yield store
    finally:
        store.close()


def load_current_snapshot(home: Path) -> tuple[PolicySnapshot, str]:
    """The current revision and its load state. A home that does not exist yet is ``absent``
    (said on stderr, so a mistyped --home is visible), never an error."""
    try:
        home_of(home).info()
    except HomeError:
        note(f"note: no store at {home}; resolving against the empty snapshot (absent)")
        next_step(
            "nothing decides here yet",
            f"rensei init --home {home}",
            f"rensei policy save FILE --home {home}",
            then=True,
        )
        return PolicySnapshot.empty(), STATE_ABSENT
    with open_policy_store(home, write=False) as store, collector_paused():
        loaded = store.load_policies()
    if loaded.detail:
        note(f"warning: {loaded.detail}")
    return loaded.snapshot, loaded.state


def open_audit_log(home: Path) -> AuditLog:
    """The home's audit log, redacting with the built-in and plugin patterns.

    Raises:
        HomeError: the home is not initialised.
        PluginError: a plugin's redaction pattern is unusable.
    """
    from ..store.audit import AuditLog

    return AuditLog.open(home_of(home), redactor=session().redactor())


def notify_observers(records: Iterable[AuditRecord]) -> None:
    """Tell every ``decision_recorded`` observer about records already committed; an observer
    that raises gets one warning line on stderr and never fails the command."""
    from ..plugins.manager import notify_recorded

    for failure in notify_recorded(session().pm, records):
        note(f"warning: {failure}")


def record_decisions(home: Path, decisions: Sequence[RouteDecision | StampedDecision]) -> None:
    """Append each decision to the home's audit log in one transaction, then notify observers."""
    from ..plugins.manager import has_observers

    pm = session().pm
    records: list[AuditRecord] = []
    with open_audit_log(home) as log:
        appended = log.append_many(decisions, recorded_at=now_rfc3339())
        if has_observers(pm):
            records = [log.get(seq) for seq in appended.seqs]
    notify_observers(records)


def require_output_dir(target: Path) -> None:
    """Refuse an output whose directory does not exist (:func:`~rensei_routing.files.
    missing_output_dir`: the one rule for every command that writes an output), before any work.

    Raises:
        InputError: the directory does not exist.
    """
    why = missing_output_dir(target)
    if why is not None:
        raise InputError(why)


def refuse_home_target(home: Home, target: Path) -> None:
    """Refuse to write an export over the home's database, its WAL/SHM or its keys."""
    resolved = target.resolve()
    guarded = [home.db_path, Path(f"{home.db_path}-wal"), Path(f"{home.db_path}-shm")]
    if resolved in {p.resolve() for p in guarded} or resolved.is_relative_to(
        home.keys_dir.resolve()
    ):
        raise InputError(f"refusing to write {target}: it is part of the home {home.path}")


@contextmanager
def prepared_output(target: Path | None, *, mode: int = 0o644) -> Iterator[PendingWrite | None]:
    """The output ``target`` made ready before the work that produces it (its temp file created
    beside it), removed unless committed; ``None`` without a target.

    Raises:
        CommandError: the file cannot be created there (a read-only mount, no permission, a
            full disk): nothing was done yet.
    """
    if target is None:
        yield None
        return
    try:
        pending = PendingWrite(target, mode=mode)
    except OSError as e:
        raise CommandError(
            f"cannot write {target}: {e.strerror or e}; nothing was decided or recorded"
        ) from e
    with pending:
        yield pending


def refuse_inside_home(home: Home, target: Path) -> None:
    """Refuse an output anywhere inside the home (``host claim --receipt``: a receipt is handed
    to work off the home; written into it, it could replace the database, a key, the host
    cache or a segment). The target's directory and the target are resolved (symlinks
    followed), as the rename and a cautious reader would.

    Raises:
        InputError: the target is inside the home.
    """
    root = home.path.resolve()
    target = Path(target)
    for where in {target.absolute().parent.resolve() / target.name, target.resolve()}:
        if where == root or root in where.parents:
            raise InputError(
                f"refusing to write {target}: it is inside the home {home.path} (its database, "
                "keys and host cache live there): write it off the home"
            )


def record_spawns(
    where: Home,
    registry: SeamRegistry,
    items: list[Spawn],
    *,
    batch: int | None = None,
    report: ShadowReport,
    label: str = "recording",
    trace: Trace = "auto",
) -> Recorded:
    """:func:`rensei_routing.shadow.batch.record_spawns` with a progress bar on a terminal's
    stderr (for more than one batch), then the observers told (``shadow record``, quickstart).
    ``batch`` defaults to the recorder's own (:data:`~rensei_routing.shadow.batch.DEFAULT_BATCH`).

    Raises:
        RenseiRoutingError: nothing was recorded; CommandError: a later batch failed (the
            message says what was recorded).
    """
    from ..shadow.batch import DEFAULT_BATCH
    from ..shadow.batch import record_spawns as batch_record

    if batch is None:
        batch = DEFAULT_BATCH
    show = sys.stderr.isatty() and len(items) > batch
    bar = (
        click.progressbar(length=len(items), label=label, file=sys.stderr)
        if show
        else nullcontext()
    )
    with bar as progress:
        try:
            recorded = batch_record(
                where,
                registry,
                items,
                clock=now_rfc3339,
                vocabulary=session().vocabulary(),
                redactor=session().redactor(),
                report=report,
                batch=batch,
                progress=None if progress is None else progress.update,
                trace=trace,
            )
        except PartialRecordError as e:
            raise CommandError(str(e)) from e
    _notify(where, recorded.seqs)
    return recorded


def _notify(home: Home, seqs: range) -> None:
    """Tell ``decision_recorded`` observers about the committed shadow records, in batches."""
    from ..plugins.manager import has_observers

    if not seqs or not has_observers(session().pm):
        return
    from ..store.audit import AuditLog

    with AuditLog.open(home) as log:
        for start in range(seqs.start, seqs.stop, 1_000):
            notify_observers([log.get(q) for q in range(start, min(start + 1_000, seqs.stop))])
