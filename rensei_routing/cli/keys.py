"""``rensei keys show``: where a home's public key and serve token are, so a command line never
has to spell ``<home>/keys/...`` out (``--token-file "$(rensei keys show --path token)"`` works
with any ``--home``), and its verifier keys (``--vkey``: the audit log's note key, as
sumdb/note writes one; ``--witness-vkey``: its cosigner key). Prints paths, the public key, key
ids and vkeys; never the private key or the token itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from ..control.snapshots import serve_token_path, snapshot_key_id
from ..core.audit.cosignature import VerifierKey
from ..core.audit.note import checkpoint_origin
from ..evidence.cosign import witness_vkey
from ._output import emit, printable
from ._root import cli, echo_json, home_option, json_option
from ._store import home_of

#: What ``--path`` may name.
PATHS: Final = ("home", "public", "token")


@cli.group(name="keys")
def keys() -> None:
    """This home's keys: where the public key and the serve token are."""


@keys.command(name="show")
@click.option(
    "--path",
    "which",
    type=click.Choice(PATHS),
    default=None,
    help="Print only this absolute path (home: the home; public: keys/host.pub; token: "
    "keys/serve.token), for a shell substitution.",
)
@click.option(
    "--vkey",
    "vkey",
    flag_value="log",
    default=None,
    help="Print only the note verifier key of this home's audit log (name+keyhash+base64, "
    "name = the checkpoints' origin): what verifies its checkpoints and proofs.",
)
@click.option(
    "--witness-vkey",
    "vkey",
    flag_value="witness",
    help="Print only this home's cosigner verifier key (type 0x04, name rensei-routing/<org>/"
    "witness): what verifies the cosignatures `rensei witness cosign` makes here.",
)
@home_option
@json_option
def keys_show(which: str | None, vkey: str | None, home: Path, json_: bool) -> None:
    """The home, its host key id and public key, its verifier keys (vkeys), the key id its
    snapshots carry, and the paths of its public key file and serve token (never the private
    key or the token's text)."""
    h = home_of(home)
    info = h.info()
    public = h.public_key()
    vkeys = {
        "log": VerifierKey(name=checkpoint_origin(info.org), public_key=public.raw).to_text(),
        "witness": witness_vkey(h),
    }
    if which is not None and vkey is not None:
        raise click.UsageError("--path and --vkey/--witness-vkey print one thing each")
    if vkey is not None:
        emit(printable(vkeys[vkey]))
        return
    paths = {
        "home": h.path.resolve(),
        "public": h.public_key_path.resolve(),
        "token": serve_token_path(h).resolve(),
    }
    if which is not None:
        emit(printable(str(paths[which])))
        return
    kid = snapshot_key_id(h)
    if json_:
        echo_json(
            {
                "home": str(paths["home"]),
                "org": info.org,
                "keyId": info.key_id,
                "publicKey": public.to_text(),
                "vkey": vkeys["log"],
                "witnessVkey": vkeys["witness"],
                "publicKeyFile": str(paths["public"]),
                "serveTokenFile": str(paths["token"]),
                "serveTokenPresent": paths["token"].is_file(),
                "snapshotKeyId": kid,
            }
        )
        return
    token_note = "" if paths["token"].is_file() else " (missing: `rensei init` makes it)"
    rows = [
        ("home", f"{paths['home']} (org {info.org})"),
        ("host key", f"{info.key_id} {public.to_text()}"),
        ("public key", str(paths["public"])),
        ("log vkey", vkeys["log"]),
        ("witness vkey", vkeys["witness"]),
        ("serve token", f"{paths['token']}{token_note}"),
    ]
    if kid != info.key_id:
        rows.append(("snapshot key id", kid))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        emit(printable(f"{name:<{width}}  {value}"))


__all__ = ["keys"]
