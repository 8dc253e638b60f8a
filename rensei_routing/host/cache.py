"""The host's verified snapshot cache: trusted keys, the last known-good snapshot on disk, the
source configuration, and what the last fetch did.

Adapter over one directory (``<home>/host``). Every snapshot is verified independently
(content hash, and against a trusted key both Ed25519 signatures: ``signature`` over the 32
content-hash bytes, ``headerSignature`` over the signed header, unless the key is trusted
``hash-only``) before it is persisted, an older revision or the held revision with another
hash is refused, and the on-disk copy is written with temp-file-then-rename and re-verified
whenever it is loaded. The read of the held copy, the
succession check and the rename run under an exclusive lock on ``<home>/host/lock`` (``flock``),
so concurrent syncs and pollers, in any number of processes, never replace a newer revision with
an older one. ``held.json`` keeps the last adopted revision (the rollback floor, which survives a
damaged ``snapshot.json``) and the damaged copies set aside. It never reads the wall clock:
``now`` is an argument.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from .. import signing
from ..core.snapshot.envelope import (
    MAX_SNAPSHOT_BYTES,
    SCOPE_HASH_ONLY,
    SCOPE_HEADER,
    SIGNATURE_SCOPES,
    RulesetSnapshot,
    check_succession,
    compiled_moment,
    verify_snapshot,
)
from ..core.snapshot.freshness import DEFAULT_MAX_SKEW, Freshness, FreshnessPolicy
from ..core.timestamps import format_age, format_timestamp
from ..errors import (
    ConfigurationError,
    DamagedCacheError,
    FutureSnapshotError,
    HomeError,
    KeyFormatError,
    RollbackError,
    SnapshotError,
)
from ..files import atomic_write, fsync_dir, make_private_dir, read_limited

__all__ = ["AcceptResult", "HostCache", "HostConfig", "host_cache"]

_SNAPSHOT: Final = "snapshot.json"
_STATUS: Final = "status.json"
_CONFIG: Final = "config.json"
_TRUSTED: Final = "trusted"
_LOCK: Final = "lock"
_HELD: Final = "held.json"
#: How many set-aside copies ``held.json`` remembers (the files themselves are never deleted).
_SET_ASIDE_KEPT: Final = 10
_FLOOR_FIELDS: Final = ("orgId", "revision", "rulesetRev", "contentHash", "compiledAt")
#: How long an accept waits for another process's accept to finish before giving up.
LOCK_WAIT_S: Final = 30.0
_MAX_SMALL_FILE: Final = 1024 * 1024
_TRUST_SUFFIX: Final = ".trust.json"
#: How many content hashes ``held.json`` remembers the first sight of (hash-only snapshots).
_FIRST_SEEN_KEPT: Final = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class HostConfig:
    """Where the host fetches from and how long a snapshot is good for."""

    endpoint: str | None = None
    token_file: str | None = None
    source_file: str | None = None
    interval_s: float = 30.0
    jitter_s: float = 5.0
    degraded_after_s: float = 300.0
    refuse_after_s: float = 1800.0

    def freshness(self) -> FreshnessPolicy:
        """Raises: ConfigurationError (``RefuseAfter < DegradedAfter``, negative bounds)."""
        return FreshnessPolicy(
            degraded_after=timedelta(seconds=self.degraded_after_s),
            refuse_after=timedelta(seconds=self.refuse_after_s),
        )

    @property
    def has_source(self) -> bool:
        return self.endpoint is not None or self.source_file is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "token_file": self.token_file,
            "source_file": self.source_file,
            "interval_s": self.interval_s,
            "jitter_s": self.jitter_s,
            "degraded_after_s": self.degraded_after_s,
            "refuse_after_s": self.refuse_after_s,
        }

    @classmethod
    def from_dict(cls, d: Any) -> HostConfig:
        """Raises: ConfigurationError."""
        if not isinstance(d, dict):
            raise ConfigurationError("host config must be an object")
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        known = set(defaults)
        unknown = set(d) - known
        if unknown:
            raise ConfigurationError(f"host config has unknown field(s): {sorted(unknown)}")
        out: dict[str, Any] = {}
        for name in ("endpoint", "token_file", "source_file"):
            v = d.get(name)
            if v is not None and not isinstance(v, str):
                raise ConfigurationError(f"host config {name} must be a string")
            out[name] = v
        for name in ("interval_s", "jitter_s", "degraded_after_s", "refuse_after_s"):
            v = d.get(name, defaults[name])
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e9:
                raise ConfigurationError(f"host config {name} must be a non-negative number")
            out[name] = float(v)
        config = cls(**out)
        config.freshness()
        return config


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptResult:
    """What offering a snapshot to the cache did: ``adopted`` a newer revision, or found the
    copy it already holds (``unchanged``)."""

    snapshot: RulesetSnapshot
    adopted: bool


class HostCache:
    """The snapshot cache in ``directory``."""

    def __init__(self, directory: Path, *, lock_wait_s: float = LOCK_WAIT_S) -> None:
        self.directory = Path(directory)
        self.lock_wait_s = lock_wait_s

    def _make_dirs(self) -> None:
        """The cache directory, and the home holding it when that is new too (a host-only
        home made by ``host trust`` or ``host sync``), each created 0700 whatever the umask.

        Raises:
            OSError: either cannot be created.
        """
        make_private_dir(self.directory.parent, parents=True)
        make_private_dir(self.directory)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the cache's exclusive lock (``flock`` on ``<directory>/lock``; released when
        the process dies, so a killed sync never wedges the next). On a read-only medium no
        lock can be taken and none is needed: nothing there can be renamed either.

        Raises:
            SnapshotError: the lock file cannot be opened, or another process held the lock
                for longer than ``lock_wait_s``.
        """
        path = self.directory / _LOCK
        flags = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        try:
            self._make_dirs()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o600)
        except OSError as e:
            if e.errno != errno.EROFS:
                raise SnapshotError(f"cannot open the host cache lock {path}: {e}") from e
            try:
                fd = os.open(path, os.O_RDONLY | flags)
            except OSError:
                yield  # read-only and never locked: no writer can rename here
                return
        try:
            deadline = time.monotonic() + self.lock_wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SnapshotError(
                            f"another process has held the host cache lock {path} for over "
                            f"{self.lock_wait_s:g}s: try again"
                        ) from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # releases the lock

    # -- trusted keys -------------------------------------------------------------------------

    @property
    def trusted_dir(self) -> Path:
        return self.directory / _TRUSTED

    def trust(
        self, public: signing.PublicKey, *, kid: str | None = None, scope: str = SCOPE_HEADER
    ) -> Path:
        """Trust ``public`` under key id ``kid`` (default: its derived id) with ``scope``
        (``header``: a snapshot must carry a valid ``headerSignature``; ``hash-only``: a
        signature over the content hash alone is enough). Idempotent; trusting a kid again
        replaces its key and scope. Returns its file: ``trusted/<kid>.pub`` for the derived id
        with scope ``header`` (the form older versions read), else ``trusted/<kid>.trust.json``
        (kid, key and scope; it wins over a ``.pub`` of the same kid).

        Raises:
            ConfigurationError: ``kid`` is not a key id or ``scope`` is unknown.
            HomeError: the cache directory cannot be written.
        """
        kid = public.key_id if kid is None else kid
        if not signing.valid_key_id(kid):
            raise ConfigurationError(f"key id {kid!r} is not 1..128 of [A-Za-z0-9._:-]")
        if scope not in SIGNATURE_SCOPES:
            raise ConfigurationError(f"scope {scope!r} is not one of {', '.join(SIGNATURE_SCOPES)}")
        entry = {"kid": kid, "publicKey": public.to_text(), "scope": scope}
        try:
            self._make_dirs()
            make_private_dir(self.trusted_dir)
            entry_path = self.trusted_dir / f"{kid}{_TRUST_SUFFIX}"
            if kid == public.key_id and scope == SCOPE_HEADER:
                path = self.trusted_dir / f"{kid}.pub"
                atomic_write(path, (public.to_text() + "\n").encode("ascii"))
                if entry_path.exists():
                    entry_path.unlink()
                    fsync_dir(self.trusted_dir)
            else:
                path = entry_path
                atomic_write(path, (json.dumps(entry, indent=1) + "\n").encode("ascii"))
        except OSError as e:
            raise HomeError(f"cannot write trusted key in {self.trusted_dir}: {e}") from e
        return path

    def trusted_entries(self) -> dict[str, tuple[signing.PublicKey, str]]:
        """Every trusted key by key id with its scope: the ``<kid>.trust.json`` entries, and
        each older ``<derived id>.pub`` (scope ``header``) with no entry of its own. A file whose
        name is not its entry's kid (or, for a ``.pub``, its key's derived id) is ignored."""
        out: dict[str, tuple[signing.PublicKey, str]] = {}
        if not self.trusted_dir.is_dir():
            return out
        for path in sorted(self.trusted_dir.glob(f"*{_TRUST_SUFFIX}")):
            found = _read_entry(path)
            if found is not None and path.name == f"{found[0]}{_TRUST_SUFFIX}":
                out[found[0]] = (found[1], found[2])
        for path in sorted(self.trusted_dir.glob("*.pub")):
            try:
                key = signing.load_public_key(path)
            except KeyFormatError:
                continue
            if path.stem == key.key_id and key.key_id not in out:
                out[key.key_id] = (key, SCOPE_HEADER)
        return out

    def trusted_keys(self) -> dict[str, signing.PublicKey]:
        """Every trusted key by key id."""
        return {kid: key for kid, (key, _) in self.trusted_entries().items()}

    def lookup(self) -> signing.KeyLookup:
        """The key lookup :func:`verify_snapshot` takes, over the trusted keys."""
        return signing.key_lookup_by_id(self.trusted_keys())

    def scope_of(self) -> Callable[[str], str]:
        """Each trusted kid's scope (``header`` for an unknown one)."""
        scopes = {kid: scope for kid, (_, scope) in self.trusted_entries().items()}
        return lambda kid: scopes.get(kid, SCOPE_HEADER)

    def _verify(self, data: bytes) -> RulesetSnapshot:
        entries = self.trusted_entries()
        scopes = {kid: scope for kid, (_, scope) in entries.items()}
        return verify_snapshot(
            data,
            lookup=signing.key_lookup_by_id({kid: key for kid, (key, _) in entries.items()}),
            scope_of=lambda kid: scopes.get(kid, SCOPE_HEADER),
        )

    # -- the cached snapshot ------------------------------------------------------------------

    @property
    def snapshot_path(self) -> Path:
        return self.directory / _SNAPSHOT

    def load(self) -> RulesetSnapshot | None:
        """The persisted last known-good snapshot, re-verified; ``None`` when there is none.

        Raises:
            DamagedCacheError: the copy on disk does not verify any more (e.g. its key was
                untrusted, or the file was edited or truncated).
            SnapshotError: it cannot be read (an I/O error).
        """
        try:
            data = read_limited(self.snapshot_path, MAX_SNAPSHOT_BYTES)
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise DamagedCacheError(f"the cached snapshot is damaged: {e}") from e
        except OSError as e:
            raise SnapshotError(f"cannot read the cached snapshot: {e}") from e
        try:
            return self._verify(data)
        except SnapshotError as e:
            raise DamagedCacheError(f"the cached snapshot no longer verifies: {e}") from e

    def accept(self, data: bytes, *, now: datetime, source: str) -> AcceptResult:
        """Verify ``data`` fully, refuse a rollback, then persist it atomically. The outcome
        (success or the reason for refusal) is recorded for ``status``; on any failure the
        last known-good copy is untouched.

        A held copy that no longer verifies is set aside first (renamed to
        ``snapshot.json.damaged-<time>``, kept for inspection, listed by :meth:`set_aside`);
        the succession check then runs against the last adopted revision kept in ``held.json``,
        so a damaged copy never lowers the rollback floor.

        A snapshot compiled more than the allowed skew (60 s) after ``now`` is refused before
        anything is touched: adopted, it would be refused at every claim.

        Raises:
            SnapshotFormatError, SnapshotVerificationError, RollbackError,
                FutureSnapshotError: refused.
            SnapshotError: the held copy cannot be read or set aside, or the new one cannot be
                written.
        """
        try:
            snap = self._verify(data)
            _refuse_future(snap, now)
            with self._exclusive():  # load, succession check and rename: one at a time
                record = self._held_record()
                try:
                    held = self.load()
                except DamagedCacheError as e:
                    held = None
                    self._set_aside(record, now=now, reason=str(e))
                floor = record.get("lastAdopted")
                if isinstance(floor, dict):
                    _check_floor(floor, snap)
                adopted = check_succession(held, snap)
                if adopted:
                    try:
                        atomic_write(self.snapshot_path, data)
                    except OSError as e:
                        raise SnapshotError(f"cannot persist the snapshot: {e}") from e
                kept = snap if adopted else held
                changed = snap.signature_scope == SCOPE_HASH_ONLY and _note_first_seen(
                    record, snap.content_hash, now
                )
                if kept is not None and floor != _floor_of(kept):
                    record["lastAdopted"] = _floor_of(kept)
                    changed = True
                if changed:
                    self._write_held_record(record)
                self.record_fetch(
                    now=now,
                    source=source,
                    ok=True,
                    detail=("adopted " if adopted else "unchanged ") + snap.ruleset_rev,
                )
        except SnapshotError as e:
            self.record_fetch(now=now, source=source, ok=False, detail=str(e))
            raise
        return AcceptResult(snapshot=snap, adopted=adopted)

    # -- the rollback floor and the copies set aside -------------------------------------------

    def _held_record(self) -> dict[str, Any]:
        """``held.json``: ``lastAdopted`` (the floor) and ``setAside``; ``{}`` when absent or
        unreadable (the floor is then the held copy alone, and is rewritten by the next sync)."""
        try:
            value = json.loads(read_limited(self.directory / _HELD, _MAX_SMALL_FILE))
        except (OSError, ValueError):
            return {}
        if not isinstance(value, dict):
            return {}
        floor = value.get("lastAdopted")
        if not (isinstance(floor, dict) and _floor_is_valid(floor)):
            value.pop("lastAdopted", None)
        if not isinstance(value.get("setAside"), list):
            value["setAside"] = []
        if not isinstance(value.get("firstSeen"), dict):
            value["firstSeen"] = {}
        return value

    def _write_held_record(self, record: dict[str, Any]) -> None:
        """Best effort, after the snapshot itself: a floor that cannot be written is one step
        behind the held copy, never ahead of it."""
        with contextlib.suppress(OSError):
            atomic_write(self.directory / _HELD, json.dumps(record, indent=1).encode("utf-8"))

    def _set_aside(self, record: dict[str, Any], *, now: datetime, reason: str) -> None:
        """Rename the damaged ``snapshot.json`` out of the way (never deleted) and remember it.

        Raises:
            SnapshotError: it cannot be renamed.
        """
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        target = self.directory / f"{_SNAPSHOT}.damaged-{stamp}"
        n = 1
        while target.exists():
            n += 1
            target = self.directory / f"{_SNAPSHOT}.damaged-{stamp}-{n}"
        try:
            os.rename(self.snapshot_path, target)
            fsync_dir(self.directory)
        except OSError as e:
            raise SnapshotError(f"cannot set the damaged cached snapshot aside: {e}") from e
        entry = {"at": format_timestamp(now), "file": target.name, "reason": reason}
        record["setAside"] = [*record.get("setAside", []), entry][-_SET_ASIDE_KEPT:]
        self._write_held_record(record)

    def last_adopted(self) -> dict[str, Any] | None:
        """The last adopted revision (``orgId, revision, rulesetRev, contentHash,
        compiledAt``): the rollback floor, kept even when ``snapshot.json`` is damaged."""
        floor = self._held_record().get("lastAdopted")
        return floor if isinstance(floor, dict) else None

    def set_aside(self) -> list[dict[str, Any]]:
        """The damaged copies set aside (newest last): ``at``, ``file`` (a name in the cache
        directory), ``reason``, and ``present`` (whether the file is still there)."""
        out = []
        for entry in self._held_record().get("setAside", []):
            if isinstance(entry, dict) and isinstance(entry.get("file"), str):
                name = Path(entry["file"]).name
                out.append({**entry, "present": (self.directory / name).is_file()})
        return out

    # -- ages and status ----------------------------------------------------------------------

    def current(self, *, now: datetime, config: HostConfig) -> tuple[RulesetSnapshot, Freshness]:
        """The cached snapshot and its age, for deciding from it.

        Raises:
            SnapshotError: no cached snapshot, or it does not verify.
            ExpiredError: older than RefuseAfter.
            FutureSnapshotError: compiled in the future beyond the allowed skew.
        """
        snap = self.load()
        if snap is None:
            raise SnapshotError("the host has no cached snapshot (rensei host sync)")
        fresh = config.freshness().judge(snap.ruleset_rev, self.aged_from(snap), now)
        return snap, dataclasses.replace(fresh, signature_scope=snap.signature_scope)

    def aged_from(self, snap: RulesetSnapshot) -> datetime:
        """The moment ``snap``'s age counts from: its ``compiledAt``, or for a hash-only
        snapshot (whose ``compiledAt`` is unsigned) the later of that and the first time this
        host saw its content hash (kept in ``held.json``)."""
        moment = compiled_moment(snap)
        if snap.signature_scope != SCOPE_HASH_ONLY:
            return moment
        seen = self._held_record().get("firstSeen", {}).get(snap.content_hash)
        if isinstance(seen, str):
            with contextlib.suppress(ValueError):
                first = datetime.fromisoformat(seen.replace("Z", "+00:00"))
                if first.tzinfo is not None:
                    moment = max(moment, first)
        return moment

    def record_fetch(self, *, now: datetime, source: str, ok: bool, detail: str) -> None:
        """Remember the last fetch's outcome (best effort: a status that cannot be written
        never turns a good fetch into a failure)."""
        status = {"at": format_timestamp(now), "source": source, "ok": ok, "detail": detail}
        try:
            self._make_dirs()
            atomic_write(self.directory / _STATUS, json.dumps(status).encode("utf-8"))
        except OSError:
            return

    def last_fetch(self) -> dict[str, Any] | None:
        try:
            data = read_limited(self.directory / _STATUS, _MAX_SMALL_FILE)
            value = json.loads(data)
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    # -- configuration ------------------------------------------------------------------------

    def config(self) -> HostConfig:
        """The host configuration (defaults when none was written).

        Raises:
            ConfigurationError: the file is unreadable or invalid.
        """
        try:
            data = read_limited(self.directory / _CONFIG, _MAX_SMALL_FILE)
        except FileNotFoundError:
            return HostConfig()
        except (OSError, ValueError) as e:
            raise ConfigurationError(f"cannot read host config: {e}") from e
        try:
            return HostConfig.from_dict(json.loads(data))
        except ValueError as e:
            raise ConfigurationError(f"host config is not JSON: {e}") from e

    def save_config(self, config: HostConfig) -> None:
        """Raises: HomeError."""
        try:
            self._make_dirs()
            atomic_write(
                self.directory / _CONFIG,
                json.dumps(config.to_dict(), indent=2).encode("utf-8"),
                mode=0o600,
            )
        except OSError as e:
            raise HomeError(f"cannot write host config in {self.directory}: {e}") from e


def _read_entry(path: Path) -> tuple[str, signing.PublicKey, str] | None:
    """``(kid, key, scope)`` of a ``<kid>.trust.json`` file; ``None`` when it is unusable."""
    try:
        value = json.loads(read_limited(path, _MAX_SMALL_FILE))
        kid, scope = value["kid"], value["scope"]
        key = signing.PublicKey.from_text(value["publicKey"])
    except (OSError, ValueError, TypeError, KeyError, KeyFormatError):
        return None
    if not signing.valid_key_id(kid) or scope not in SIGNATURE_SCOPES:
        return None
    return kid, key, scope


def _note_first_seen(record: dict[str, Any], content_hash: str, now: datetime) -> bool:
    """Remember when this host first saw ``content_hash`` (the newest
    :data:`_FIRST_SEEN_KEPT` hashes); whether the record changed."""
    seen = record.setdefault("firstSeen", {})
    if content_hash in seen:
        return False
    seen[content_hash] = format_timestamp(now)
    for old in list(seen)[:-_FIRST_SEEN_KEPT]:
        del seen[old]
    return True


def _refuse_future(snap: RulesetSnapshot, now: datetime) -> None:
    """Raises: FutureSnapshotError: ``compiledAt`` is later than ``now`` by over the skew."""
    ahead = compiled_moment(snap) - now
    if ahead > DEFAULT_MAX_SKEW:
        one_ms = timedelta(milliseconds=1)
        early, skew = (format_age(d // one_ms) for d in (ahead, DEFAULT_MAX_SKEW))
        raise FutureSnapshotError(
            f"refusing {snap.ruleset_rev}: compiled {early} in the future (allowed skew {skew}; "
            f"is the control side's clock ahead?): the held copy is kept"
        )


def _floor_of(snap: RulesetSnapshot) -> dict[str, Any]:
    return {
        "orgId": snap.org_id,
        "revision": snap.revision,
        "rulesetRev": snap.ruleset_rev,
        "contentHash": snap.content_hash,
        "compiledAt": snap.compiled_at,
    }


def _floor_is_valid(floor: dict[str, Any]) -> bool:
    return (
        set(floor) == set(_FLOOR_FIELDS)
        and isinstance(floor["revision"], int)
        and not isinstance(floor["revision"], bool)
        and all(isinstance(floor[k], str) for k in _FLOOR_FIELDS if k != "revision")
    )


def _check_floor(floor: dict[str, Any], candidate: RulesetSnapshot) -> None:
    """The succession rule of :func:`check_succession` against the last adopted revision.

    Raises:
        RollbackError: another org, an older revision, or that revision with another hash.
    """
    if candidate.org_id != floor["orgId"]:
        raise RollbackError(
            f"snapshot is for org {candidate.org_id!r}, the host last adopted {floor['orgId']!r}"
        )
    if candidate.revision < floor["revision"]:
        raise RollbackError(
            f"refusing {candidate.ruleset_rev}: older than the last adopted {floor['rulesetRev']}"
        )
    if candidate.revision == floor["revision"] and candidate.content_hash != floor["contentHash"]:
        raise RollbackError(
            f"refusing {candidate.ruleset_rev}: same revision as the last adopted copy with "
            f"another content hash (equivocation)"
        )


def host_cache(home: Path) -> HostCache:
    """The host cache of the home at ``home`` (``<home>/host``)."""
    return HostCache(Path(home) / "host")
