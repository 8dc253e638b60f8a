"""Backup and restore of one home: a consistent online copy of the database through SQLite's
backup API (writers keep appending), the keys and the host cache beside it, and a manifest
signed with the home's host key that names the SHA-256 of the database file and of every other
file copied (and its mode); restore verifies a staged copy (the manifest's signature, every
file against it, nothing more and nothing less; the chain, its checkpoints and any off-host
``--checkpoint``, policy hashes, the latest snapshot's signature) before it takes the home's
place.

Adapter: files and apsw. Never writes into a directory it did not create: every copy is built
in a sibling staging directory and renamed into place whole, so a failure leaves nothing
half-written and a refused restore leaves the target as it was. The clock is the caller's.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .. import signing
from ..core.audit.note import Checkpoint
from ..core.canonical import canonical_bytes
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import BackupError, RenseiRoutingError
from ..files import fsync_dir, missing_output_dir
from ..store.audit import AuditLog
from ..store.audit.segments import SegmentLock, segments_dir
from ..store.db import SCHEMA_VERSION, close_quietly, copy_database
from ..store.home import Home
from ..store.policies import PolicyStore
from ..store.snapshots import SnapshotStore

__all__ = ["MANIFEST", "BackupManifest", "backup_home", "restore_home", "verify_home"]

#: The manifest a backup carries beside the database.
MANIFEST: Final = "rensei-backup.json"
#: What a backup holds besides the database (copied as files when present).
_EXTRA: Final = ("keys", "host", "config.toml", "audit")
#: The manifest format: 2 is signed and covers every file (1, unsigned, is refused).
_FORMAT: Final = 2
#: What the manifest's signature is over: this, then the manifest's canonical bytes without it.
_SIGNED_PREFIX: Final = b"rensei-backup-manifest/2\n"
_DB: Final = "rensei.db"


@dataclass(frozen=True, slots=True, kw_only=True)
class BackupManifest:
    """What a verified copy holds: the audit records present and the head, each policy
    revision's hash."""

    created_at: str
    source: str
    org: str
    key_id: str
    schema_version: int
    records: int
    head_hash: str
    checkpoints: int
    policy_revisions: tuple[tuple[int, str], ...]
    snapshot: str | None
    #: ``sha256:`` of the backup's database file.
    database: str = ""
    #: ``(path, sha256:..., mode)`` of every other file of the backup, sorted by path.
    files: tuple[tuple[str, str, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": _FORMAT,
            "created_at": self.created_at,
            "source": self.source,
            "org": self.org,
            "key_id": self.key_id,
            "schema_version": self.schema_version,
            "records": self.records,
            "head_hash": self.head_hash,
            "checkpoints": self.checkpoints,
            "policy_revisions": [
                {"revision": r, "content_hash": h} for r, h in self.policy_revisions
            ],
            "snapshot": self.snapshot,
            "database": self.database,
            "files": [{"path": p, "sha256": h, "mode": m} for p, h, m in self.files],
        }

    def signed_bytes(self) -> bytes:
        """What the manifest's signature is over."""
        return _SIGNED_PREFIX + canonical_bytes(self.to_dict())

    @classmethod
    def from_dict(cls, d: Any) -> BackupManifest:
        """Raises: BackupError (not a manifest of this format)."""
        try:
            if d["format"] == 1:
                raise BackupError(
                    f"{MANIFEST} is format 1 (unsigned, made by an older version): it cannot be "
                    "restored as verified; make a new backup of the home"
                )
            if d["format"] != _FORMAT:
                raise BackupError(f"unknown backup format {d['format']!r}")
            return cls(
                created_at=str(d["created_at"]),
                source=str(d["source"]),
                org=str(d["org"]),
                key_id=str(d["key_id"]),
                schema_version=int(d["schema_version"]),
                records=int(d["records"]),
                head_hash=str(d["head_hash"]),
                checkpoints=int(d["checkpoints"]),
                policy_revisions=tuple(
                    (int(p["revision"]), str(p["content_hash"])) for p in d["policy_revisions"]
                ),
                snapshot=None if d["snapshot"] is None else str(d["snapshot"]),
                database=str(d["database"]),
                files=tuple((str(f["path"]), str(f["sha256"]), int(f["mode"])) for f in d["files"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BackupError(f"{MANIFEST} is malformed: {e}") from e


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _file_digests(root: Path) -> tuple[tuple[str, str, int], ...]:
    """``(path, sha256, mode)`` of every file under ``root`` but the database and the manifest,
    sorted by path (a symlink or other special file is refused: a backup holds plain files).

    Raises:
        BackupError: a special file.
        OSError: a file cannot be read.
    """
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel in (MANIFEST, _DB) or rel.startswith(_DB + "-"):
            continue
        mode = path.lstat().st_mode
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise BackupError(f"{root}/{rel} is not a regular file")
        out.append((rel, _digest(path), stat.S_IMODE(mode)))
    return tuple(out)


def verify_home(
    home: Home,
    *,
    created_at: str,
    source: str,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    checkpoints: Sequence[Checkpoint] = (),
    shown_as: Path | None = None,
) -> BackupManifest:
    """Check a home copy through and describe it: the chain and every stored checkpoint (and
    every one of ``checkpoints``, e.g. kept off the host) verify, every policy revision loads
    ``ok`` (its stored hash is its content's), and the latest snapshot verifies against the
    home's key. Messages name ``shown_as`` (default: the copy's path), e.g. the home a
    staged copy was made from.

    Raises:
        BackupError: any of those does not hold (the message says which).
        StoreError, HomeError: the copy cannot be opened.
    """
    info = home.info()
    shown = home.path if shown_as is None else shown_as
    with AuditLog.open(home) as log:
        chain = log.verify_segments(checkpoints)
    result = chain.result
    if not result:
        raise BackupError(
            f"the audit chain of {shown} does not verify "
            f"(seq {result.first_broken_seq}: {result.reason})"
        )
    if chain.unverifiable:
        size, name = chain.unverifiable[0]
        raise BackupError(
            f"the checkpoint of size {size:,} lies inside pruned segment {name} of "
            f"{shown}: the records it covers are no longer held, so it cannot be checked"
        )
    revisions: list[tuple[int, str]] = []
    conn = home.connect()
    try:
        store = PolicyStore(conn, vocabulary=vocabulary)
        for row in store.history():
            loaded = store.load(row.revision)
            if loaded.state != "ok":
                raise BackupError(
                    f"policy revision {row.revision} of {shown} loads {loaded.state}: "
                    f"{loaded.detail}"
                )
            revisions.append((row.revision, row.content_hash))
        snapshots = SnapshotStore(conn, org_id=info.org)
        snapshot = None
        if snapshots.compiled_from() is not None:
            snapshot = snapshots.load(lookup=home.snapshot_lookup()).ruleset_rev
    except RenseiRoutingError as e:
        if isinstance(e, BackupError):
            raise
        raise BackupError(f"{shown} does not verify: {e}") from e
    finally:
        close_quietly(conn)
    return BackupManifest(
        created_at=created_at,
        source=source,
        org=info.org,
        key_id=info.key_id,
        schema_version=SCHEMA_VERSION,
        records=chain.records,  # present: after a prune, fewer than the next seq
        head_hash=result.head_hash,
        checkpoints=result.checkpoints_checked - len(checkpoints),  # the stored ones
        policy_revisions=tuple(revisions),
        snapshot=snapshot,
    )


def _inside(path: Path, root: Path) -> bool:
    """Whether ``path`` (which need not exist) is ``root`` or lies under it, symlinks resolved."""
    return path.resolve().is_relative_to(root.resolve())


def _copy_failed(e: OSError) -> BackupError:
    """One line for a failed copy (``shutil.Error`` carries a list of every failed file)."""
    detail: object = e
    if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
        first = e.args[0][0]
        detail = first[-1] if isinstance(first, tuple) else first
        detail = f"{detail} (and {len(e.args[0]) - 1} more)" if len(e.args[0]) > 1 else detail
    elif e.strerror:
        detail = f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return BackupError(f"cannot copy the home: {detail}")


def _staging(target: Path) -> Path:
    """A new private directory beside ``target`` (same file system, so a rename publishes it)."""
    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staged = parent / f".{target.name}.partial-{secrets.token_hex(4)}"
    staged.mkdir(mode=0o700)
    os.chmod(staged, 0o700)
    return staged


def _copy_home(source: Home, staged: Path, *, include_manifest: bool, live: bool) -> None:
    """The database through the backup API, then the keys, host cache, config and sealed
    audit segments as files (modes kept: the private key stays 0600, a segment 0444). Backing
    up a home (``include_manifest`` false) holds the segments' lock throughout, so no rotation
    or prune moves records between the database copy and the segment files."""
    lock = None
    if not include_manifest and segments_dir(source.db_path).is_dir():
        lock = SegmentLock(source.db_path)
        lock.acquire(wait=True)
    try:
        _copy_files(source, staged, include_manifest=include_manifest, live=live)
    finally:
        if lock is not None:
            lock.release()


def _copy_files(source: Home, staged: Path, *, include_manifest: bool, live: bool) -> None:
    conn = source.connect()
    try:
        copy_database(
            conn,
            Home(staged).db_path,
            wal=live,
            busy_timeout_ms=source.connect_options().busy_timeout_ms,
        )
    finally:
        close_quietly(conn)
    names = [*_EXTRA, MANIFEST] if include_manifest else list(_EXTRA)
    for name in names:
        src = source.path / name
        if src.is_dir():
            skip = shutil.ignore_patterns(".lock")  # the segments' lock file is no content
            shutil.copytree(src, staged / name, copy_function=shutil.copy2, ignore=skip)
        elif src.is_file():
            shutil.copy2(src, staged / name)


def _publish(staged: Path, target: Path) -> None:
    os.rename(staged, target)
    fsync_dir(target.absolute().parent)


def _discard(staged: Path) -> None:
    shutil.rmtree(staged, ignore_errors=True)


def backup_home(
    home: Home,
    target: Path,
    *,
    created_at: str,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
) -> BackupManifest:
    """Copy ``home`` to the new directory ``target`` while it stays in use, verify the copy,
    and write its manifest; ``target`` appears only once all of that succeeded.

    Raises:
        BackupError: ``target`` exists, its directory does not exist, or the copy does not
            verify.
        HomeError, StoreError: the home cannot be read or the copy cannot be written.
    """
    home.info()
    if target.exists() or target.is_symlink():
        raise BackupError(f"refusing to back up into {target}: it exists")
    if _inside(target, home.path):
        raise BackupError(
            f"refusing to back up into {target}: it is inside the home {home.path} "
            "(the copy would copy itself); choose a directory outside it"
        )
    missing = missing_output_dir(target)
    if missing is not None:
        raise BackupError(missing)
    staged = _staging(target)
    try:
        try:
            _copy_home(home, staged, include_manifest=False, live=False)
        except OSError as e:
            raise _copy_failed(e) from e
        found = verify_home(
            Home(staged),
            created_at=created_at,
            source=str(home.path.resolve()),
            vocabulary=vocabulary,
            shown_as=home.path,
        )
        key = home.private_key()
        if key.public_key.key_id != found.key_id:
            raise BackupError(f"the host key of {home.path} is not the one its database names")
        manifest = dataclasses.replace(
            found, database=_digest(staged / _DB), files=_file_digests(staged)
        )
        signature = base64.b64encode(key.sign(manifest.signed_bytes())).decode("ascii")
        doc = {**manifest.to_dict(), "signature": "ed25519:" + signature}
        data = json.dumps(doc, indent=2).encode("utf-8") + b"\n"
        with open(staged / MANIFEST, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _publish(staged, target)
    except BaseException:
        _discard(staged)
        raise
    return manifest


def read_manifest(source: Path) -> tuple[BackupManifest, bytes]:
    """The manifest and its signature (not checked here: the key is the staged copy's).

    Raises:
        BackupError: no manifest (not a backup made by ``rensei backup``), or malformed.
    """
    try:
        doc = json.loads((source / MANIFEST).read_text("utf-8"))
    except FileNotFoundError as e:
        raise BackupError(f"{source} is not a rensei backup (no {MANIFEST})") from e
    except (OSError, ValueError) as e:
        raise BackupError(f"cannot read {source / MANIFEST}: {e}") from e
    manifest = BackupManifest.from_dict(doc)
    text = doc.get("signature")
    if not isinstance(text, str) or not text.startswith("ed25519:"):
        raise BackupError(f"{MANIFEST} is not signed")
    try:
        return manifest, base64.b64decode(text[len("ed25519:") :], validate=True)
    except (binascii.Error, ValueError) as e:
        raise BackupError(f"{MANIFEST}'s signature is not base64") from e


def _check_signed(manifest: BackupManifest, signature: bytes, staged: Home, source: Path) -> None:
    """The manifest is signed by the staged copy's host key, the key its database names.

    Raises:
        BackupError: it is not.
    """
    key = staged.private_key().public_key
    if key.key_id != manifest.key_id or staged.info().key_id != manifest.key_id:
        raise BackupError(
            f"the backup {source} does not match its manifest: its host key is {key.key_id}, "
            f"its database names {staged.info().key_id}, the manifest says {manifest.key_id}"
        )
    if not signing.check(key, manifest.signed_bytes(), signature):
        raise BackupError(
            f"the backup {source}'s manifest signature does not verify with its host key "
            f"{key.key_id} (the manifest was edited)"
        )


def _check_files(manifest: BackupManifest, source: Path, staged: Path, db_digest: str) -> None:
    """The database file and every other file are the ones the manifest names.

    Raises:
        BackupError: one differs, is missing, or is not in the manifest.
    """
    if db_digest != manifest.database:
        raise BackupError(
            f"the backup {source} does not match its manifest: {_DB} is {db_digest}, "
            f"the manifest says {manifest.database}"
        )
    found = {p: (h, m) for p, h, m in _file_digests(staged)}
    named = {p: (h, m) for p, h, m in manifest.files}
    for path in sorted(found.keys() | named.keys()):
        if path not in named:
            raise BackupError(f"the backup {source} holds {path}, which its manifest does not name")
        if path not in found:
            raise BackupError(f"the backup {source} lacks {path}, which its manifest names")
        if found[path] != named[path]:
            raise BackupError(
                f"the backup {source} does not match its manifest: {path} differs (content or mode)"
            )


def restore_home(
    source: Path,
    target: Path,
    *,
    force: bool,
    created_at: str,
    set_aside: Callable[[Path], Path],
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    checkpoints: Sequence[Checkpoint] = (),
) -> tuple[BackupManifest, Path | None]:
    """Restore the backup ``source`` as the home ``target``: stage a copy, check the manifest's
    signature (by the copy's host key) and every file against it (the database file's digest,
    each other file's digest and mode, no file more or less), verify the copy (chain, stored
    checkpoints and ``checkpoints``, e.g. one kept off the host, policy hashes, snapshot
    signature) and that it matches the manifest, then rename it into place. An existing
    ``target`` is refused unless ``force``; with it the old home is renamed to
    ``set_aside(target)`` (kept, never deleted) and that path returned.

    Raises:
        BackupError: refused (a live home without ``force``), not a backup, or the copy does
            not verify or does not match its manifest; ``target`` is left as it was.
        HomeError, StoreError: the backup cannot be read.
    """
    expected, signature = read_manifest(source)
    if (target.exists() or target.is_symlink()) and not force:
        live = (target / "rensei.db").exists()
        what = "a live rensei home" if live else "an existing path"
        raise BackupError(f"refusing to restore over {target}: it is {what} (--force replaces it)")
    if _inside(target, source):
        raise BackupError(
            f"refusing to restore into {target}: it is inside the backup {source}; "
            "choose a home outside it"
        )
    staged = _staging(target)
    try:
        try:
            db_digest = _digest(source / _DB)
            _copy_home(Home(source), staged, include_manifest=True, live=True)
            _check_files(expected, source, staged, db_digest)
        except OSError as e:
            raise _copy_failed(e) from e
        _check_signed(expected, signature, Home(staged), source)
        found = verify_home(
            Home(staged),
            created_at=created_at,
            source=str(source),
            vocabulary=vocabulary,
            checkpoints=checkpoints,
            shown_as=source,
        )
        found = dataclasses.replace(found, database=expected.database, files=expected.files)
        names = ("org", "key_id", "records", "head_hash", "checkpoints", "policy_revisions")
        for name in (*names, "snapshot"):
            if getattr(found, name) != getattr(expected, name):
                raise BackupError(
                    f"the backup {source} does not match its manifest: {name} is "
                    f"{getattr(found, name)!r}, the manifest says {getattr(expected, name)!r}"
                )
        aside = None
        if target.exists() or target.is_symlink():
            aside = set_aside(target)
            os.rename(target, aside)
        _publish(staged, target)
    except BaseException:
        _discard(staged)
        raise
    return found, aside
