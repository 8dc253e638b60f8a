"""Quickstart's steps, each the service its own command uses: a fresh home it can prove it made,
the example org and policies loaded, a snapshot compiled, served on loopback and synced into the
host cache, sample spawns replayed in shadow mode, a what-if, a checkpoint and a verify.

Owns the order of the steps and the quickstart home's rule (recreated on every run; a directory
it did not make is refused). Reads no input file (the CLI reads the shipped examples with its
own readers and hands them in) and prints nothing; the clock is the caller's.
"""

from __future__ import annotations

import os
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
from ..core.routing.policy import PolicySnapshot
from ..core.routing.vocabulary import Vocabulary
from ..core.shadow.report import ShadowReport
from ..core.shadow.spawn import Spawn
from ..core.shadow.whatif import WhatIfSummary
from ..core.snapshot.org import OrgData
from ..core.snapshot.validators import SnapshotValidator
from ..core.timestamps import format_timestamp
from ..errors import InputError
from ..host.cache import HostCache, HostConfig, host_cache
from ..host.poll import poll_once
from ..plugins.manager import SeamRegistry
from ..shadow.batch import Recorded, record_spawns
from ..shadow.whatif import compare_chain
from ..store.audit import AuditLog
from ..store.home import Home
from ..store.policies import PolicyStore
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
    key and ``host sync`` from that endpoint; the server is stopped before returning."""
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
    home: Home, candidate: PolicySnapshot, *, vocabulary: Vocabulary, redactor: Redactor
) -> tuple[PolicySnapshot, WhatIfSummary]:
    """``policy whatif``: every recorded context under the current revision and ``candidate``."""
    with closing(home.connect(write=False)) as conn:
        loaded = PolicyStore(conn, vocabulary=vocabulary).load()
    with AuditLog.open(home, redactor=redactor) as log:
        summary = compare_chain(
            log, (loaded.snapshot, loaded.state), candidate, examples=1, vocabulary=vocabulary
        )
    return loaded.snapshot, summary


def checkpoint_verify(home: Home, *, redactor: Redactor) -> tuple[Checkpoint, VerifyResult]:
    """``audit checkpoint`` then ``audit verify``."""
    with AuditLog.open(home, redactor=redactor) as log:
        cp = log.checkpoint()
        result = log.verify()
    return cp, result
