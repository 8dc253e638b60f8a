"""The home directory: where its database and host key live, ``init``, and opening it. Must not
print, read the environment, or ever put private key material in a message.

Layout::

    <home>/rensei.db          SQLite store (WAL: rensei.db-wal, rensei.db-shm beside it)
    <home>/keys/host.key      Ed25519 private key, mode 0600 (directory 0700)
    <home>/keys/host.pub      its public key

The database's ``meta`` table records ``org_id`` and ``host_key_id``; a home is initialised when
both are set and the key file matches the recorded id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import apsw

from .. import signing
from ..errors import HomeError, KeyFormatError, MalformedError, SignatureError, StoreError
from .db import connect

__all__ = ["DEFAULT_ORG", "Home", "HomeInfo"]

DEFAULT_ORG: Final = "local"
_ORG = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_META_ORG: Final = "org_id"
_META_KEY: Final = "host_key_id"


@dataclass(frozen=True, slots=True, kw_only=True)
class HomeInfo:
    """What a home holds: its path, org, host key id, and whether ``init`` just created it."""

    path: Path
    org: str
    key_id: str
    created: bool = False

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "home": str(self.path),
            "org": self.org,
            "key_id": self.key_id,
            "created": self.created,
        }


@dataclass(frozen=True, slots=True)
class Home:
    """A home directory (which need not exist yet)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def db_path(self) -> Path:
        """``<home>/rensei.db``."""
        return self.path / "rensei.db"

    @property
    def keys_dir(self) -> Path:
        """``<home>/keys``."""
        return self.path / "keys"

    @property
    def private_key_path(self) -> Path:
        """``<home>/keys/host.key`` (mode 0600)."""
        return self.keys_dir / "host.key"

    @property
    def public_key_path(self) -> Path:
        """``<home>/keys/host.pub``."""
        return self.keys_dir / "host.pub"

    def init(self, *, org: str | None = None) -> HomeInfo:
        """Create the home, its database and host key; idempotent.

        On an initialised home this keeps the existing key and org and reports
        ``created=False``. Without ``org`` a new home gets :data:`DEFAULT_ORG`.

        Raises:
            MalformedError: ``org`` is not ``[a-z0-9][a-z0-9._-]{0,63}``.
            HomeError: the home belongs to another org, its key is missing or does not match
                the database, or the directory cannot be created.
            StoreError: the database cannot be opened or written.
        """
        if org is not None and not _ORG.fullmatch(org):
            raise MalformedError("org", f"{org!r} must match {_ORG.pattern}")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.keys_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as e:
            raise HomeError(f"cannot create home {self.path}: {e.strerror}") from e
        conn = connect(self.db_path, write=True)
        try:
            meta = _read_meta(conn)
            existing = meta.get(_META_ORG)
            if existing is not None and org is not None and org != existing:
                raise HomeError(
                    f"home {self.path} is initialised for org {existing!r}, not {org!r}"
                )
            key = self._ensure_key(meta.get(_META_KEY))
            try:
                with conn:
                    conn.execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES (?, ?), (?, ?)",
                        (_META_ORG, org or DEFAULT_ORG, _META_KEY, key.key_id),
                    )
                    created = conn.changes() > 0
                    meta = _read_meta(conn)
            except apsw.Error as e:
                raise StoreError(f"cannot initialise {self.db_path}: {e}") from e
        finally:
            conn.close()
        if org is not None and meta[_META_ORG] != org:
            raise HomeError(f"home {self.path} is initialised for org {meta[_META_ORG]!r}")
        if meta[_META_KEY] != key.key_id:
            raise HomeError(f"host key {self.private_key_path} does not match this home's database")
        return HomeInfo(path=self.path, org=meta[_META_ORG], key_id=key.key_id, created=created)

    def _ensure_key(self, recorded_id: str | None) -> signing.PublicKey:
        """Load the host key, creating it when the home has none yet; keep the .pub file in step."""
        if not self.private_key_path.exists():
            if recorded_id is not None:
                raise HomeError(
                    f"host key {self.private_key_path} is missing; restore it from a backup "
                    "(a new key would disown every checkpoint this home has signed)"
                )
            try:
                signing.save_private_key(signing.generate(), self.private_key_path)
            except SignatureError as e:
                raise HomeError(str(e)) from e
        public = self.private_key().public_key
        if recorded_id is not None and public.key_id != recorded_id:
            raise HomeError(f"host key {self.private_key_path} does not match this home's database")
        try:
            current = signing.load_public_key(self.public_key_path)
        except KeyFormatError:
            current = None
        if current != public:
            try:
                signing.save_public_key(public, self.public_key_path)
            except SignatureError as e:
                raise HomeError(str(e)) from e
        return public

    def info(self) -> HomeInfo:
        """The org and key id of an initialised home.

        Raises:
            HomeError: the home is not initialised (the message says to run ``rensei init``).
            StoreError: the database cannot be read.
        """
        if not self.db_path.is_file():
            raise self._not_initialised()
        conn = connect(self.db_path)
        try:
            meta = _read_meta(conn)
        finally:
            conn.close()
        if _META_ORG not in meta or _META_KEY not in meta:
            raise self._not_initialised()
        return HomeInfo(path=self.path, org=meta[_META_ORG], key_id=meta[_META_KEY])

    def connect(self, *, write: bool = False) -> apsw.Connection:
        """A connection to this home's database; the caller closes it.

        Raises:
            HomeError: the home is not initialised.
            StoreError: the database cannot be opened.
        """
        self.info()
        return connect(self.db_path, write=write)

    def private_key(self) -> signing.PrivateKey:
        """The host's signing key.

        Raises:
            HomeError: the key file is missing or malformed (the message never shows its text).
        """
        try:
            return signing.load_private_key(self.private_key_path)
        except KeyFormatError as e:
            raise HomeError(f"host key unusable: {e}; run `rensei init`") from e

    def public_key(self) -> signing.PublicKey:
        """The host's public key (derived from the private key file when the .pub file is absent).

        Raises:
            HomeError: neither key file is usable.
        """
        try:
            return signing.load_public_key(self.public_key_path)
        except KeyFormatError:
            return self.private_key().public_key

    def _not_initialised(self) -> HomeError:
        return HomeError(f"no rensei home at {self.path}: run `rensei init` first")


def _read_meta(conn: apsw.Connection) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    except apsw.Error as e:
        raise StoreError(f"cannot read home metadata: {e}") from e
