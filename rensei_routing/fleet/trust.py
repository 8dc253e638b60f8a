"""Which hosts the fleet store trusts: one row of ``fleet_hosts`` per host id, holding the
Ed25519 public key that signs that host's audit checkpoints (its ``<home>/keys/host.pub``).

A key is trusted centrally, in the database, by an operator (``rensei fleet trust``), never
taken from an export: an ingest finds the host of a checkpoint by the key that signed it, so a
file names no host and cannot claim one. A host id is trusted with one key and a key belongs to
one host; trusting the same pair again changes nothing, another key for a trusted host id (or a
trusted key for another id) is refused: a host whose key changed is trusted under a new id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .. import signing
from ..core.audit.chain import GENESIS_HASH
from ..errors import FleetError, InputError
from .db import store_error

if TYPE_CHECKING:
    import psycopg

__all__ = ["HOST_ID", "TrustResult", "check_host_id", "trust_host", "trusted_keys"]

#: A host id: letters, digits and ``._:-``, up to 128 characters, starting alphanumeric.
HOST_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def check_host_id(host_id: str) -> str:
    """``host_id`` if it is a valid host id.

    Raises:
        InputError: it is not.
    """
    if not HOST_ID.fullmatch(host_id):
        raise InputError(
            f"not a host id (letters, digits and ._:-, up to 128, starting alphanumeric): "
            f"{host_id!r}"
        )
    return host_id


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustResult:
    """A trusted host: its id, its key, and whether this call added it."""

    host_id: str
    key_id: str
    added: bool

    def to_dict(self) -> dict[str, Any]:
        return {"host_id": self.host_id, "key_id": self.key_id, "added": self.added}


def trust_host(conn: psycopg.Connection[Any], host_id: str, key: signing.PublicKey) -> TrustResult:
    """Trust ``key`` as the checkpoint key of ``host_id`` (idempotent for the same pair).

    Raises:
        InputError: ``host_id`` is not a valid host id.
        FleetError: the host id is trusted with another key, or the key with another host id.
        FleetStoreError: the database failed (nothing written).
    """
    import psycopg

    check_host_id(host_id)
    text = key.to_text()
    try:
        with conn.transaction():
            rows = conn.execute(
                "SELECT host_id, public_key FROM fleet_hosts WHERE host_id = %s OR public_key = %s"
                " FOR UPDATE",
                (host_id, text),
            ).fetchall()
            for known_id, known_key in rows:
                if known_id == host_id and known_key == text:
                    return TrustResult(host_id=host_id, key_id=key.key_id, added=False)
                if known_id == host_id:
                    raise FleetError(
                        f"host {host_id} is trusted with another key "
                        f"({signing.PublicKey.from_text(known_key).key_id}); a host whose key "
                        "changed is trusted under a new host id"
                    )
                raise FleetError(f"key {key.key_id} is already trusted for host {known_id}")
            conn.execute(
                "INSERT INTO fleet_hosts(host_id, public_key, head_hash) VALUES (%s, %s, %s)",
                (host_id, text, GENESIS_HASH),
            )
    except psycopg.Error as e:
        raise store_error(f"cannot trust host {host_id}", e) from e
    return TrustResult(host_id=host_id, key_id=key.key_id, added=True)


def trusted_keys(conn: psycopg.Connection[Any]) -> list[tuple[str, signing.PublicKey]]:
    """Every trusted host id and its key.

    Raises:
        FleetStoreError: the database failed.
    """
    import psycopg

    try:
        with conn.transaction():
            rows = conn.execute("SELECT host_id, public_key FROM fleet_hosts ORDER BY host_id")
            return [(h, signing.PublicKey.from_text(k)) for h, k in rows.fetchall()]
    except psycopg.Error as e:
        raise store_error("cannot read the trusted host keys", e) from e
