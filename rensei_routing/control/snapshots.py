"""The control side of one home: compile the current policy revision and org data into the next
signed ruleset snapshot, and tell whether the latest snapshot is stale.

Adapter: opens the home's database, signs with the home's key (the same key and ``signing``
module as the audit checkpoints). The clock is the caller's (``compiled_at``).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from .. import signing
from ..core.audit.chain import format_timestamp
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..core.snapshot.envelope import RulesetSnapshot, compiled_moment
from ..core.snapshot.validators import SnapshotValidator, ValidatorResult
from ..errors import ConfigurationError, HomeError
from ..files import create_new, mode_is_private, token_from_file
from ..store.backends import open_control_store
from ..store.control import ControlStore
from ..store.home import Home
from ..store.settings import SNAPSHOT_KEY_ID, read_text, write_text
from ..store.snapshots import CompileResult
from .server import SnapshotService

__all__ = [
    "DEFAULT_RESEAL_AFTER_S",
    "Signer",
    "compile_snapshot",
    "control_store",
    "ensure_serve_token",
    "home_jwks",
    "home_lookup",
    "is_stale",
    "latest_snapshot",
    "newer_in",
    "newer_snapshot",
    "refresh_in",
    "refresh_snapshot",
    "serve_token_path",
    "set_snapshot_key_id",
    "snapshot_key_id",
    "snapshot_service",
    "source_revisions",
    "start_snapshots_after",
    "validator_results",
]

#: ``rensei serve --reseal-after``'s default: an unchanged snapshot is re-signed this often.
DEFAULT_RESEAL_AFTER_S: Final = 120.0


def compile_snapshot(
    home: Home,
    *,
    compiled_at: str,
    validators: Sequence[SnapshotValidator] = (),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> CompileResult:
    """Compile and publish the next snapshot of ``home``'s org.

    The policies and org data are read inside the write transaction that allocates the
    revision (:meth:`ControlStore.compile_current`), so a racing ``org load`` or ``policy
    save`` is either in this revision or in a later one, never lost from a later one.

    Raises:
        SnapshotValidationError: a validator failed (nothing published).
        HomeError, StoreError: the home or its database is unusable.
    """
    key = home.private_key()
    kid = snapshot_key_id(home)
    with control_store(home, write=True, vocabulary=vocabulary) as store:
        # The inputs are read inside the write transaction that publishes.
        result = store.compile_current(
            compiled_at=compiled_at, signing_key_id=kid, sign=key.sign, validators=validators
        )
    assert result is not None  # only_if_stale=False always publishes or raises
    return result


@contextmanager
def control_store(
    home: Home, *, write: bool = False, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> Iterator[ControlStore]:
    """The home's control store (SQLite, or PostgreSQL per ``[store] url``), closed on exit.

    Raises:
        HomeError, StoreError (``DatabaseUnreachableError``, ``DriverMissingError``).
    """
    store = open_control_store(home, write=write, vocabulary=vocabulary)
    try:
        yield store
    finally:
        store.close()


def snapshot_key_id(home: Home) -> str:
    """The key id ``home``'s snapshots carry (:meth:`Home.snapshot_key_id`)."""
    return home.snapshot_key_id()


def set_snapshot_key_id(home: Home, kid: str) -> None:
    """Make ``kid`` the key id of ``home``'s snapshots (``init --key-id``); the same id again is
    a no-op.

    Raises:
        ConfigurationError: ``kid`` is not a key id, or the home already has another one (its
            hosts trust the key under that id).
        StoreError, HomeError: the home is unusable.
    """
    if not signing.valid_key_id(kid):
        raise ConfigurationError(f"--key-id {kid!r} is not 1..128 of [A-Za-z0-9._:-]")
    conn = home.connect(write=True)
    try:
        current = read_text(conn, SNAPSHOT_KEY_ID)
        if current == kid:
            return
        if current is not None:
            raise ConfigurationError(
                f"this home's snapshots already carry key id {current!r}; its hosts trust the "
                "key under that id (rotate to a new home to change it)"
            )
        write_text(conn, SNAPSHOT_KEY_ID, kid)
    finally:
        conn.close()


def home_lookup(home: Home) -> signing.KeyLookup:
    """The home's own key under its derived id and its snapshot key id."""
    return home.snapshot_lookup()


def home_jwks(home: Home) -> dict[str, Any]:
    """The JWKS document ``serve`` publishes: the home's public key under its snapshot key id."""
    return {"keys": [signing.jwk(snapshot_key_id(home), home.public_key())]}


def start_snapshots_after(home: Home, revision: int) -> None:
    """Make ``home``'s first snapshot revision ``revision + 1`` (``init --start-after``): the
    key rotation's new control home takes over the org above every revision its hosts hold.

    Raises:
        SnapshotError: the home already compiled revisions below ``revision``.
        HomeError, StoreError: the home or its database is unusable.
    """
    with control_store(home, write=True) as store:
        store.set_start_after(revision)


def source_revisions(home: Home) -> tuple[int, int]:
    """``(latest policy revision, latest org-data revision)`` of ``home`` (0 when none).

    Raises:
        StoreError: the database could not be read.
    """
    with control_store(home) as store:
        return store.source_revisions()


def is_stale(home: Home) -> bool:
    """Whether the latest snapshot was compiled from older data than the home now holds (or
    none was compiled).

    Raises:
        StoreError: the database could not be read.
    """
    with control_store(home) as store:
        compiled = store.compiled_from()
        return compiled is None or compiled != store.source_revisions()


def serve_token_path(home: Home) -> Path:
    """``<home>/keys/serve.token``: the bearer token the snapshot endpoint requires."""
    return home.keys_dir / "serve.token"


def ensure_serve_token(home: Home) -> str:
    """The home's serve token, created (mode 0600, 32 random bytes, URL-safe base64) on first
    use and never replaced. A token file group or others can read is refused, not fixed: who
    read it can fetch every snapshot, so chmod alone would keep a leaked token in use.

    Raises:
        HomeError: the token file cannot be created or read, or is readable by others.
    """
    path = serve_token_path(home)
    try:
        create_new(path, (secrets.token_urlsafe(32) + "\n").encode("ascii"))
        private = mode_is_private(path)
    except OSError as e:
        raise HomeError(f"cannot create {path}: {e.strerror or e}") from e
    if not private:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        raise HomeError(
            f"{path} is readable by others (mode {mode:04o}): delete it (serve makes a new one "
            "and hosts need it) or, if nobody else could have read it, chmod 600 it"
        )
    try:
        return token_from_file(str(path))
    except ConfigurationError as e:
        raise HomeError(str(e)) from e


def latest_snapshot(home: Home) -> RulesetSnapshot | None:
    """The latest stored snapshot, verified against the home's key; ``None`` when none.

    Raises:
        SnapshotError, StoreError, HomeError.
    """
    with control_store(home) as store:
        if store.latest_mark() is None:
            return None
        return store.load_snapshot(lookup=home_lookup(home))


def newer_snapshot(home: Home, held: RulesetSnapshot) -> RulesetSnapshot | None:
    """The latest stored snapshot when it is newer than ``held`` (a later revision, or the same
    revision re-sealed with a later ``compiledAt``), verified; else ``None``. One small read
    when nothing changed: what ``serve`` runs on every request.

    Raises:
        SnapshotError, StoreError, HomeError.
    """
    with control_store(home) as store:
        return newer_in(store, held, lookup=signing.key_lookup([home.public_key()]))


def newer_in(
    store: ControlStore, held: RulesetSnapshot | None, *, lookup: signing.KeyLookup
) -> RulesetSnapshot | None:
    """:func:`newer_snapshot` over an open store (``held`` ``None``: the latest, if any).

    Raises:
        SnapshotError, StoreError.
    """
    mark = store.latest_mark()
    if mark is None or (held is not None and mark[0] < held.revision):
        return None
    if held is not None and mark == (held.revision, held.compiled_at):
        return None
    fresh = store.load_snapshot(lookup=lookup)
    if held is not None and (fresh.revision, compiled_moment(fresh)) <= (
        held.revision,
        compiled_moment(held),
    ):
        return None
    return fresh


def refresh_snapshot(
    home: Home,
    held: RulesetSnapshot,
    *,
    now: datetime,
    reseal_after: timedelta,
    validators: Sequence[SnapshotValidator] = (),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> RulesetSnapshot | None:
    """What the serving side does off the request path: recompile when the data changed since
    the latest snapshot, else re-seal it when it is older than ``reseal_after`` (so hosts stay
    fresh while nothing changes), else nothing.

    Raises:
        SnapshotValidationError: the changed data fails a validator (nothing published; the
            previous snapshot keeps serving).
        SnapshotError, StoreError, HomeError.
    """
    signer = Signer.of(home)
    with control_store(home, write=True, vocabulary=vocabulary) as store:
        return refresh_in(
            store, held, signer, now=now, reseal_after=reseal_after, validators=validators
        )


@dataclass(frozen=True, slots=True)
class Signer:
    """What a compile signs with: the home's key, its snapshot key id, and the lookup that
    verifies what the home compiled (read once per serve)."""

    sign: Callable[[bytes], bytes]
    key_id: str
    lookup: signing.KeyLookup

    @classmethod
    def of(cls, home: Home) -> Signer:
        """Raises: HomeError, StoreError."""
        return cls(home.private_key().sign, snapshot_key_id(home), home_lookup(home))


def refresh_in(
    store: ControlStore,
    held: RulesetSnapshot | None,
    signer: Signer,
    *,
    now: datetime,
    reseal_after: timedelta,
    validators: Sequence[SnapshotValidator] = (),
) -> RulesetSnapshot | None:
    """:func:`refresh_snapshot` over an open store. Both steps decide under the org's compile
    lock (``only_if_stale``, ``older_than``), so replicas sharing one database compile a change
    once and re-seal once per period; what another replica published is :func:`newer_in`'s.

    Raises:
        SnapshotValidationError, SnapshotError, StoreError.
    """
    stamp = format_timestamp(now)
    stale = store.compiled_from() != store.source_revisions()  # the cheap look, unlocked
    result = (
        store.compile_current(
            compiled_at=stamp,
            signing_key_id=signer.key_id,
            sign=signer.sign,
            validators=validators,
            only_if_stale=True,
        )
        if stale
        else None
    )
    if result is not None:
        return result.snapshot
    if held is None or now - compiled_moment(held) <= reseal_after:
        return None
    return store.reseal(
        compiled_at=stamp,
        signing_key_id=signer.key_id,
        sign=signer.sign,
        lookup=signer.lookup,
        older_than=now - reseal_after,
    )


def validator_results(results: Iterable[ValidatorResult]) -> list[Mapping[str, Any]]:
    """JSON form of validator verdicts."""
    return [r.to_dict() for r in results]


def snapshot_service(
    home: Home,
    *,
    clock: Callable[[], datetime],
    validators: Sequence[SnapshotValidator] = (),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    reseal_after: float = DEFAULT_RESEAL_AFTER_S,
) -> SnapshotService:
    """The endpoint's view of ``home``: its latest snapshot, compiled on first need, recompiled
    after a write and re-sealed after ``reseal_after`` seconds, all at ``clock()``."""
    return SnapshotService(
        latest=lambda: latest_snapshot(home),
        compile_now=lambda: (
            compile_snapshot(
                home,
                compiled_at=format_timestamp(clock()),
                validators=validators,
                vocabulary=vocabulary,
            ).snapshot
        ),
        needs_refresh=lambda held: True,
        newer=lambda held: newer_snapshot(home, held),
        clock=clock,
        refresh=lambda held: refresh_snapshot(
            home,
            held,
            now=clock(),
            reseal_after=timedelta(seconds=reseal_after),
            validators=validators,
            vocabulary=vocabulary,
        ),
    )
