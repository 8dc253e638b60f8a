"""Quickstart's steps, each the service its own command uses: a fresh home it can prove it made,
the example org and policies loaded, a snapshot compiled, served on loopback and synced into the
host cache, sample spawns replayed in shadow mode, a what-if, a checkpoint and a verify.

Owns the order of the steps and the quickstart home's rule (recreated on every run; a directory
it did not make is refused). Reads no input file (the CLI reads the shipped examples with its
own readers and hands them in) and prints nothing; the clock is the caller's.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ..control.server import make_app, serve_in_thread
from ..control.snapshots import (
    compile_snapshot,
    ensure_serve_token,
    serve_token_path,
    snapshot_service,
)
from ..core.audit.chain import VerifyResult
from ..core.audit.note import Checkpoint
from ..core.redact import Redactor
from ..core.routing.context import RouteContext
from ..core.routing.policy import PolicySnapshot
from ..core.routing.resolver import explain
from ..core.routing.vocabulary import Vocabulary
from ..core.shadow.report import ShadowReport
from ..core.shadow.spawn import Spawn
from ..core.shadow.whatif import WhatIfSummary
from ..core.snapshot.freshness import StampedDecision
from ..core.snapshot.org import OrgData
from ..core.snapshot.validators import SnapshotValidator
from ..core.timestamps import format_timestamp
from ..errors import HomeError, InputError, RenseiRoutingError, SnapshotError
from ..host.cache import HostCache, HostConfig, host_cache
from ..host.poll import poll_once
from ..plugins.manager import SeamRegistry
from ..shadow.batch import Recorded, record_spawns
from ..shadow.whatif import compare_chain
from ..store.audit import AuditLog
from ..store.home import Home
from ..store.policies import PolicyStore
from ..store.settings import QUICKSTART_CANDIDATE, QUICKSTART_ID, read_text, write_text
from ..store.snapshots import OrgStore

__all__ = [
    "MARKER",
    "QUICKSTART_ORG",
    "Served",
    "checkpoint_verify",
    "compile_serve_sync",
    "fresh_home",
    "load_examples",
    "shadow_replay",
    "what_if",
]

QUICKSTART_ORG: Final = "quickstart"
MARKER: Final = ".rensei-quickstart"


#: What a quickstart home holds at its top level (the database's journal files included).
_HOME_ENTRIES: Final = frozenset(
    {MARKER, "rensei.db", "rensei.db-wal", "rensei.db-shm", "rensei.db-journal", "keys", "host"}
)
#: What its ``keys/`` holds.
_KEY_FILES: Final = frozenset({"host.key", "host.pub", "serve.token"})
#: The marker's bound (a JSON object of two short strings).
_MARKER_MAX: Final = 4096
_ID: Final = re.compile(r"[0-9a-f]{32}")


def _marker_id(path: Path) -> str | None:
    """The home id a quickstart marker at ``path`` names, or ``None`` when it is not one (a
    symlink, a planted file of any other content, an older run's plain-text marker)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MARKER_MAX:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("madeBy") != "rensei quickstart":
        return None
    home_id = doc.get("homeId")
    return home_id if isinstance(home_id, str) and _ID.fullmatch(home_id) else None


def _not_ours(path: Path) -> str | None:
    """Why the non-empty directory ``path`` is not a home quickstart can prove it made, or
    ``None`` when it is: its marker names a home id, the home's database records the same id
    (a ``setting.quickstart_id`` row) for org ``quickstart``, and it holds nothing but what
    quickstart makes. A marker alone (a run interrupted before init) is also ours."""
    home_id = _marker_id(path / MARKER)
    if home_id is None:
        return "it holds no quickstart marker naming a home id"
    entries = {e.name for e in path.iterdir()}
    if entries == {MARKER}:
        return None
    if not entries <= _HOME_ENTRIES:
        return f"it holds {sorted(entries - _HOME_ENTRIES)[0]!r}, which quickstart does not make"
    keys = path / "keys"
    if keys.is_symlink() or (keys.exists() and not {e.name for e in keys.iterdir()} <= _KEY_FILES):
        return "its keys/ holds files quickstart does not make"
    home = Home(path)
    if not home.db_path.is_file() or home.db_path.is_symlink():
        return "it has no database"
    try:
        with closing(home.connect(write=False)) as conn:
            stored = read_text(conn, QUICKSTART_ID)
        org = home.info().org
    except RenseiRoutingError as e:
        return f"its database cannot be read ({e})"
    if stored != home_id or org != QUICKSTART_ORG:
        return "its database does not record the marker's home id"
    return None


def fresh_home(path: Path) -> Home:
    """Remove a previous quickstart home at ``path`` and initialise a new one (with its marker).

    Only a home this command can prove it made is removed (see :func:`_not_ours`): the marker
    holds a random home id that the home's database also records, and the home holds nothing
    but quickstart data. A planted marker, a real home, a symlink: refused, nothing touched.

    Raises:
        InputError: ``path`` holds something that is not a quickstart home, or is a symlink.
        HomeError, StoreError: the home cannot be created.
    """
    if path.is_symlink():
        raise InputError(
            f"{path} is a symbolic link; give the quickstart a directory of its own (--home)"
        )
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{path} exists and is not a directory")
        if any(path.iterdir()):
            why = _not_ours(path)
            if why is not None:
                raise InputError(
                    f"{path} is not empty and was not made by `rensei quickstart` ({why}); "
                    "choose another --home (the quickstart recreates its home)"
                )
            try:
                shutil.rmtree(path)
            except OSError as e:
                raise HomeError(f"cannot remove the old quickstart home {path}: {e}") from e
    home_id = secrets.token_hex(16)
    # the marker first, so a run interrupted during init leaves a home the next run may recreate
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        (path / MARKER).write_text(
            json.dumps({"madeBy": "rensei quickstart", "homeId": home_id}) + "\n",
            encoding="utf-8",
        )
    except OSError as e:
        raise HomeError(f"cannot create the quickstart home {path}: {e.strerror or e}") from e
    home = Home(path)
    home.init(org=QUICKSTART_ORG)
    with closing(home.connect(write=True)) as conn:
        write_text(conn, QUICKSTART_ID, home_id)
    return home


def load_examples(
    home: Home, org: OrgData, policies: PolicySnapshot, *, vocabulary: Vocabulary, saved_at: str
) -> tuple[int, PolicySnapshot]:
    """``org load`` then ``policy save``: the org data revision and the saved policy revision."""
    with closing(home.connect(write=True)) as conn:
        org_rev = OrgStore(conn).save(org, saved_at=saved_at)
        saved = PolicyStore(conn, vocabulary=vocabulary).save(policies.policies, saved_at=saved_at)
    return org_rev, saved


@dataclass(frozen=True, slots=True)
class Served:
    """What :func:`compile_serve_sync` did: the revision compiled, where it was served, what the
    host's sync said, and the host cache it synced."""

    ruleset_rev: str
    endpoint: str
    synced: str
    cache: HostCache


def compile_serve_sync(
    home: Home,
    *,
    clock: Callable[[], datetime],
    validators: Sequence[SnapshotValidator],
    vocabulary: Vocabulary,
) -> Served:
    """``snapshot compile``, ``serve`` on a free loopback port, ``host trust`` of the home's own
    key and ``host sync`` from that endpoint; the server is stopped before returning, and the
    host's configured source cleared (the endpoint no longer answers)."""
    compiled = compile_snapshot(
        home,
        compiled_at=format_timestamp(clock()),
        validators=validators,
        vocabulary=vocabulary,
    ).snapshot
    token = ensure_serve_token(home)
    service = snapshot_service(home, clock=clock, validators=validators, vocabulary=vocabulary)
    server = serve_in_thread(
        make_app(now=clock, token=token, service=service), host="127.0.0.1", port=0
    )
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
        synced = poll_once(cache, config, now=clock())
    finally:
        server.stop()
    # The endpoint is gone once quickstart returns: leave no dead source behind for `host run`
    # or `host status` to name (they say to `host sync` from a live one instead).
    cache.save_config(HostConfig(**{**config.to_dict(), "endpoint": None, "token_file": None}))
    return Served(compiled.ruleset_rev, endpoint, synced, cache)


def shadow_replay(
    home: Home,
    registry: SeamRegistry,
    spawns: Sequence[Spawn],
    *,
    clock: Callable[[], str],
    vocabulary: Vocabulary,
    redactor: Redactor,
) -> tuple[ShadowReport, Recorded]:
    """``shadow record`` of ``spawns``, with the agreement report by mechanism."""
    report = ShadowReport("mechanism")
    recorded = record_spawns(
        home, registry, spawns, clock=clock, vocabulary=vocabulary, redactor=redactor, report=report
    )
    return report, recorded


def what_if(
    home: Home,
    candidate: PolicySnapshot,
    *,
    name: str,
    vocabulary: Vocabulary,
    redactor: Redactor,
) -> tuple[PolicySnapshot, WhatIfSummary]:
    """``policy whatif``: every recorded context under the current revision and ``candidate``
    (the file ``name``). The candidate is kept in the home (``setting.quickstart_candidate``),
    so the console's what-if page offers what quickstart evaluated."""
    kept = {"file": name, "candidate": candidate.to_dict()}
    with closing(home.connect(write=True)) as conn:
        write_text(conn, QUICKSTART_CANDIDATE, json.dumps(kept, sort_keys=True))
        loaded = PolicyStore(conn, vocabulary=vocabulary).load()
    with AuditLog.open(home, redactor=redactor) as log:
        summary = compare_chain(
            log, (loaded.snapshot, loaded.state), candidate, examples=1, vocabulary=vocabulary
        )
    return loaded.snapshot, summary


def explain_cached(
    home: Home, context: RouteContext, *, now: datetime, vocabulary: Vocabulary, redactor: Redactor
) -> StampedDecision:
    """``explain --snapshot``: ``context`` resolved against the host's cached snapshot (its
    policy bundle), stamped with the snapshot's age at ``now``.

    Raises:
        SnapshotError: no cached snapshot, it does not verify, or it is past RefuseAfter.
    """
    cache = host_cache(home.path)
    snap, fresh = cache.current(now=now, config=cache.config())
    try:
        policies = PolicySnapshot.from_dict(
            snap.sections.get("policyBundle"), path="policyBundle", vocabulary=vocabulary
        )
    except InputError as e:
        raise SnapshotError(f"cached snapshot {snap.ruleset_rev}: {e}") from e
    decision = explain(
        context, policies, snapshot_state=policies.state(), vocabulary=vocabulary, redactor=redactor
    )
    return StampedDecision(decision, fresh)


def checkpoint_verify(home: Home, *, redactor: Redactor) -> tuple[Checkpoint, VerifyResult]:
    """``audit checkpoint`` then ``audit verify``."""
    with AuditLog.open(home, redactor=redactor) as log:
        cp = log.checkpoint()
        result = log.verify()
    return cp, result
