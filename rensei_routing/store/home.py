"""The home directory: where its database and host key live, ``init``, and opening it. Must not
print, read the environment, or ever put private key material in a message.

Layout::

    <home>/                   mode 0700 (``init`` creates it so, and tightens an existing one)
    <home>/rensei.db          SQLite store (WAL: rensei.db-wal, rensei.db-shm beside it)
    <home>/config.toml        optional settings (``[store] busy_timeout = 30``, in seconds;
                              ``[audit] rotate_at_records``, read by :mod:`.rotation`;
                              ``[store] url = "postgresql://..."``: the control side's data
                              lives in that database, see :mod:`.control`)
    <home>/audit/segments/    sealed audit segments, ``<first>-<last>.db`` (see :mod:`.segments`)
    <home>/keys/host.key      Ed25519 private key, mode 0600 (directory 0700)
    <home>/keys/host.pub      its public key
    <home>/keys/serve.token   the snapshot endpoint's bearer token, 0600 (made by ``rensei init``)

The database's ``meta`` table records ``org_id`` and ``host_key_id``; a home is initialised when
both are set and the key file matches the recorded id. Every connection to the home's database
is made by :meth:`Home.connect` (or with :meth:`Home.connect_options`), so each one waits the
home's one busy timeout and uses the home's VFS.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import apsw

from ..errors import HomeError, KeyFormatError, MalformedError, SignatureError
from ..files import make_private_dir
from .db import CONFIG_FILE, DEFAULT_BUSY_TIMEOUT_MS, close_quietly, connect, store_error

if TYPE_CHECKING:  # signing (nacl) is imported where a key is read or made, not to open a home
    from .. import signing

__all__ = ["DEFAULT_ORG", "ConnectOptions", "Home", "HomeInfo"]

DEFAULT_ORG: Final = "local"
_ORG = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_META_ORG: Final = "org_id"
_META_KEY: Final = "host_key_id"


@dataclass(frozen=True, slots=True, kw_only=True)
class HomeInfo:
    """What a home holds: its path, org, host key id, whether ``init`` just created it, and
    what ``init`` found worth a warning (e.g. a ``keys/`` directory others can write to)."""

    path: Path
    org: str
    key_id: str
    created: bool = False
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """JSON form."""
        return {
            "home": str(self.path),
            "org": self.org,
            "key_id": self.key_id,
            "created": self.created,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectOptions:
    """How every connection to one home is opened: its busy timeout and its SQLite VFS."""

    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS
    vfs: str | None = None


@dataclass(frozen=True, slots=True)
class Home:
    """A home directory (which need not exist yet).

    ``vfs`` names a registered SQLite VFS every connection to this home uses (``None``: SQLite's
    default); it exists so tests can inject I/O faults, and is not a CLI option.
    """

    path: Path
    vfs: str | None = None
    #: ``info()`` once read (a home's org and key id do not change under a running command).
    _memo: dict[str, HomeInfo] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def config_path(self) -> Path:
        """``<home>/config.toml`` (optional)."""
        return self.path / CONFIG_FILE

    def connect_options(self) -> ConnectOptions:
        """The busy timeout (``[store] busy_timeout`` in seconds in ``config.toml``, default 30)
        and VFS every connection to this home uses.

        Raises:
            HomeError: ``config.toml`` exists but is unreadable, not TOML, or the timeout is not
                a non-negative number of seconds.
        """
        return ConnectOptions(busy_timeout_ms=self._busy_timeout_ms(), vfs=self.vfs)

    def _config(self) -> dict[str, object]:
        try:
            f = open(self.config_path, "rb")  # noqa: SIM115 (closed below, once parsed)
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise HomeError(f"cannot read {self.config_path}: {e.strerror}") from e
        import tomllib  # only for a home that has a config file (most have none)

        with f:
            try:
                return tomllib.load(f)
            except OSError as e:
                raise HomeError(f"cannot read {self.config_path}: {e.strerror}") from e
            except tomllib.TOMLDecodeError as e:
                raise HomeError(f"{self.config_path} is not valid TOML: {e}") from e

    def store_url(self) -> str | None:
        """``[store] url`` in ``config.toml``: the database the control side's data lives in
        (``postgresql://...``), or ``None`` for the home's own SQLite file.

        Raises:
            HomeError: ``config.toml`` is unusable, or the url is not a PostgreSQL URL.
        """
        store = self._config().get("store", {})
        value = store.get("url") if isinstance(store, dict) else None
        if value is None:
            return None
        if not isinstance(value, str) or not value.startswith(("postgresql://", "postgres://")):
            raise HomeError(  # never the value: a URL may carry a password
                f"{self.config_path}: [store] url must be a postgresql:// URL"
            )
        return value

    def set_store_url(self, url: str) -> None:
        """Write ``[store] url = url`` into ``config.toml`` (created mode 0600 when absent; the
        rest of the file kept). The same url again is a no-op.

        Raises:
            HomeError: the file is unusable, or it already names another database (a home's
                control data does not move by editing a setting).
        """
        current = self.store_url()
        if current == url:
            return
        if current is not None:
            raise HomeError(
                f"{self.config_path} already names another control database under [store] url; "
                "a home's control data does not move with a setting (back it up and restore)"
            )
        line = "url = " + _toml_string(url) + "\n"
        try:
            text = self.config_path.read_text("utf-8") if self.config_path.exists() else ""
            match = re.search(r"(?m)^\[store\][ \t]*(#.*)?$\n?", text)
            if match is None:
                sep = "" if not text or text.endswith("\n") else "\n"
                text = text + sep + ("\n" if text else "") + "[store]\n" + line
            else:
                head = text[: match.end()]
                head += "" if head.endswith("\n") else "\n"
                text = head + line + text[match.end() :]
            fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise HomeError(f"cannot write {self.config_path}: {e.strerror}") from e
        self.store_url()  # what was written reads back

    def _busy_timeout_ms(self) -> int:
        store = self._config().get("store", {})
        value = store.get("busy_timeout") if isinstance(store, dict) else None
        if value is None:
            return DEFAULT_BUSY_TIMEOUT_MS
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= 86_400
        ):
            raise HomeError(
                f"{self.config_path}: [store] busy_timeout must be a number of seconds "
                f"between 0 and 86400, not {value!r}"
            )
        return round(value * 1000)

    def _connect_db(self, *, write: bool) -> apsw.Connection:
        options = self.connect_options()
        return connect(
            self.db_path, write=write, busy_timeout_ms=options.busy_timeout_ms, vfs=options.vfs
        )

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

    def init_outputs(self) -> tuple[Path, ...]:
        """What ``init`` may create here: the home (and its missing parents), ``keys/`` and its
        files, ``config.toml``, and, only while the database does not exist, the database and
        its WAL/SHM/journal (an existing database's companions belong to whoever has it open).
        ``init`` removes what of these it created when it fails
        (:func:`~rensei_routing.files.removed_on_failure`)."""
        keys = (self.keys_dir, self.private_key_path, self.public_key_path)
        fresh = not (self.db_path.exists() or self.db_path.is_symlink())
        db = (
            tuple(Path(f"{self.db_path}{s}") for s in ("", "-wal", "-shm", "-journal"))
            if fresh
            else ()
        )
        return (self.path, *keys, self.keys_dir / "serve.token", self.config_path, *db)

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
            make_private_dir(self.path, parents=True)
            make_private_dir(self.keys_dir)
        except OSError as e:
            raise HomeError(f"cannot create home {self.path}: {e.strerror}") from e
        warnings = _tighten_home(self.path) + _keys_dir_warnings(self.keys_dir)
        conn = self._connect_db(write=True)
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
                raise store_error(f"cannot initialise {self.db_path}", e, self.db_path) from e
        finally:
            close_quietly(conn)
        if org is not None and meta[_META_ORG] != org:
            raise HomeError(f"home {self.path} is initialised for org {meta[_META_ORG]!r}")
        if meta[_META_KEY] != key.key_id:
            raise HomeError(f"host key {self.private_key_path} does not match this home's database")
        return HomeInfo(
            path=self.path,
            org=meta[_META_ORG],
            key_id=key.key_id,
            created=created,
            warnings=warnings,
        )

    def _ensure_key(self, recorded_id: str | None) -> signing.PublicKey:
        """Load the host key, creating it when the home has none yet; keep the .pub file in step."""
        from .. import signing

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
        """The org and key id of an initialised home, read from its database once per
        :class:`Home` object (a command makes one per home, so it reads them once).

        Raises:
            HomeError: the home is not initialised (the message says to run ``rensei init``).
            StoreError: the database cannot be read.
        """
        known = self._memo.get("info")
        if known is not None:
            return known
        if not self.db_path.is_file():
            raise self._not_initialised()
        conn = self._connect_db(write=False)
        try:
            meta = _read_meta(conn)
        finally:
            close_quietly(conn)
        if _META_ORG not in meta or _META_KEY not in meta:
            raise self._not_initialised()
        info = HomeInfo(path=self.path, org=meta[_META_ORG], key_id=meta[_META_KEY])
        self._memo["info"] = info
        return info

    def connect(self, *, write: bool = False) -> apsw.Connection:
        """A connection to this home's database; the caller closes it.

        Raises:
            HomeError: the home is not initialised.
            StoreError: the database cannot be opened.
        """
        self.info()
        return self._connect_db(write=write)

    def private_key(self) -> signing.PrivateKey:
        """The host's signing key.

        Raises:
            HomeError: the key file is missing or malformed (the message never shows its text).
        """
        from .. import signing

        try:
            return signing.load_private_key(self.private_key_path)
        except KeyFormatError as e:
            raise HomeError(f"host key unusable: {e}; run `rensei init`") from e

    def public_key(self) -> signing.PublicKey:
        """The host's public key (derived from the private key file when the .pub file is absent).

        Raises:
            HomeError: neither key file is usable.
        """
        from .. import signing

        try:
            return signing.load_public_key(self.public_key_path)
        except KeyFormatError:
            return self.private_key().public_key

    def snapshot_key_id(self) -> str:
        """The key id this home's snapshots carry (``init --key-id``, else the derived id).

        Raises:
            HomeError, StoreError: the home is unusable.
        """
        from .settings import SNAPSHOT_KEY_ID, read_text

        conn = self.connect()
        try:
            kid = read_text(conn, SNAPSHOT_KEY_ID)
        finally:
            conn.close()
        return self.public_key().key_id if kid is None else kid

    def snapshot_lookup(self) -> signing.KeyLookup:
        """The home's own key under its derived id and its snapshot key id: what verifies the
        snapshots this home compiled.

        Raises:
            HomeError, StoreError: the home is unusable.
        """
        from .. import signing

        public = self.public_key()
        return signing.key_lookup_by_id({public.key_id: public, self.snapshot_key_id(): public})

    def _not_initialised(self) -> HomeError:
        return HomeError(f"no rensei home at {self.path}: run `rensei init` first")


def _toml_string(text: str) -> str:
    """``text`` as a TOML basic string."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _read_meta(conn: apsw.Connection) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    except apsw.Error as e:
        raise store_error("cannot read home metadata", e, conn.filename) from e


def _tighten_home(path: Path) -> tuple[str, ...]:
    """An existing home directory that its group or others may enter (say 0755, from ``mkdir``
    under the usual umask) is set to 0700, and the warning says so; one that cannot be changed
    (not ours, read-only medium) is warned about as it is."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return ()
    if not mode & (stat.S_IRWXG | stat.S_IRWXO):
        return ()
    try:
        os.chmod(path, 0o700)
    except OSError as e:
        return (
            f"{path} is open to its group or others (mode {mode:04o}) and could not be set to "
            f"0700 ({e.strerror}); run chmod 700 {path}",
        )
    return (f"{path} was open to its group or others (mode {mode:04o}): set to 0700",)


def _keys_dir_warnings(keys_dir: Path) -> tuple[str, ...]:
    """A warning when ``keys/`` is group- or world-writable (someone else could swap the key)."""
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(os.stat(keys_dir).st_mode)
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (
                f"{keys_dir} is writable by its group or by others (mode {mode:04o}): anyone "
                f"who can write there can replace the host key; run chmod 700 {keys_dir}",
            )
    return ()
