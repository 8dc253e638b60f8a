"""``rensei host receipt verify`` and ``rensei host session start|heartbeat|end|list``: admitted
work on the host (:mod:`rensei_routing.host.sessions` owns the postures; this module parses and
prints). Attached to the ``host`` group.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import signing
from ..core.snapshot.receipts import MAX_RECEIPT_BYTES, Receipt, parse_receipt
from ..core.timestamps import format_age
from ..errors import KeyFormatError, ReceiptError
from ..files import read_limited
from ._clock import now
from ._output import emit, note, printable
from ._root import CommandError, echo_json, home_option, json_option
from ._session import session
from .host import host

if TYPE_CHECKING:
    from ..host.sessions import HostSessions

_COUNT = click.IntRange(min=1, max=1_000_000)


class ReceiptRefusedError(CommandError):
    """A receipt or session was refused: one line naming the reason, exit 1."""


def _read_receipt(path: Path) -> Receipt:
    try:
        data = read_limited(path, MAX_RECEIPT_BYTES)
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot read receipt {path}: {e}") from e
    try:
        return parse_receipt(data)
    except ReceiptError as e:
        raise ReceiptRefusedError(f"receipt {path} refused: {e}") from e


def _sessions(home: Path) -> HostSessions:
    from ..host.cache import host_cache
    from ..host.sessions import HostSessions
    from ._store import home_of

    h = home_of(home)
    h.info()
    return HostSessions(h, host_cache(home), redactor=session().redactor())


def _refused(e: ReceiptError) -> ReceiptRefusedError:
    return ReceiptRefusedError(f"refused: {e}")


@host.group(name="receipt")
def receipt() -> None:
    """Admission receipts: what an admitted claim hands the work it admits."""


@receipt.command(name="verify")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key",
    "keyfile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The host's public key (ed25519:<base64>); default: this home's own key.",
)
@home_option
@json_option
def receipt_verify(file: Path, keyfile: Path | None, home: Path, json_: bool) -> None:
    """Check one receipt offline: well formed, and signed by the host's key over exactly its
    fields. FILE: the receipt (`host claim --receipt FILE`) or `host claim --json`'s output.
    Exit 0 valid, 1 refused (with the reason)."""
    found = _read_receipt(file)
    try:
        if keyfile is not None:
            public = signing.load_public_key(keyfile)
        else:
            from ._store import home_of

            public = home_of(home).public_key()
    except KeyFormatError as e:
        raise CommandError(str(e)) from e
    if found.signing_key_id != public.key_id:
        raise _refused(
            ReceiptError("wrong-key", f"signed by {found.signing_key_id}, not {public.key_id}")
        )
    try:
        ok = signing.check(public, found.signed_bytes(), found.signature_bytes())
    except ReceiptError as e:
        raise _refused(e) from e
    if not ok:
        raise _refused(ReceiptError("bad-signature", "the signature does not verify (edited?)"))
    if json_:
        echo_json({"valid": True, **found.to_dict()})
        return
    emit(
        printable(
            f"valid: {found.receipt_id} pool {found.pool} against {found.ruleset_rev}, admitted "
            f"{found.admitted_at}, lease {format_age(found.lease_ms)}, signed by {public.key_id}"
        )
    )


@host.group(name="session")
def session_group() -> None:
    """Sessions under admission receipts: start, heartbeat, end, list."""


@session_group.command(name="start")
@click.option(
    "--receipt",
    "receipt_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The admission receipt of `rensei host claim --receipt FILE` (or that claim's "
    "`--json` output, which carries it).",
)
@click.option(
    "--on-revoke",
    type=click.Choice(["finish", "drain"]),
    default="finish",
    show_default=True,
    help="When a newer snapshot no longer grants the pool: keep running (finish) or end (drain).",
)
@click.option(
    "--inflight-limit",
    type=_COUNT,
    default=None,
    help="The authoritative bound: open sessions on this host (default: none).",
)
@click.option(
    "--local-cap",
    type=_COUNT,
    default=None,
    help="Open sessions per project while the live signal is unavailable (default 4).",
)
@home_option
@json_option
def session_start(
    receipt_file: Path,
    on_revoke: str,
    inflight_limit: int | None,
    local_cap: int | None,
    home: Path,
    json_: bool,
) -> None:
    """Start a session under a receipt issued by this host (once per receipt, within its
    lease), if the budget posture admits it. Prints the session id on stdout (the confirmation
    on stderr). FILE: the receipt (`host claim --receipt FILE`) or `host claim --json`'s
    output."""
    from ..host.sessions import DEFAULT_LOCAL_CAP, BudgetLimits, epoch_ms

    found = _read_receipt(receipt_file)
    moment = now()
    limits = BudgetLimits(
        inflight_limit=inflight_limit,
        local_cap=DEFAULT_LOCAL_CAP if local_cap is None else local_cap,
    )
    try:
        with _sessions(home) as sessions:
            row, budget = sessions.start(found, now=moment, on_revoke=on_revoke, budget=limits)
    except ReceiptError as e:
        raise _refused(e) from e
    if json_:
        echo_json({**row.to_dict(epoch_ms(moment)), "budget": budget.reason})
        return
    emit(row.session_id)  # the result (for `id=$(rensei host session start ...)`)
    note(f"{row.session_id} started under {row.receipt_id} ({budget.reason})")


@session_group.command(name="heartbeat")
@click.argument("session_id")
@home_option
@json_option
def session_heartbeat(session_id: str, home: Path, json_: bool) -> None:
    """Renew a session's lease. Says `grant-revoked` (with the revision) when a newer verified
    snapshot no longer grants its pool; a drain session is then ended. Exit 1 for an ended,
    expired or unknown session."""
    from ..host.sessions import epoch_ms

    moment = now()
    try:
        with _sessions(home) as sessions:
            beat = sessions.heartbeat(session_id, now=moment)
    except ReceiptError as e:
        raise _refused(e) from e
    if json_:
        echo_json(beat.to_dict(epoch_ms(moment)))
        return
    line = f"{session_id}: {beat.action}, lease until +{format_age(beat.session.lease_ms)}"
    if beat.revoked_rev is not None:
        line += f"; grant-revoked by {beat.revoked_rev} (on revoke: {beat.session.on_revoke})"
    emit(printable(line))


@session_group.command(name="end")
@click.argument("session_id")
@home_option
def session_end(session_id: str, home: Path) -> None:
    """End a session whose work finished. Exit 1 for an ended, expired or unknown session."""
    try:
        with _sessions(home) as sessions:
            row = sessions.end(session_id, now=now())
    except ReceiptError as e:
        raise _refused(e) from e
    note(f"{row.session_id} ended")


@session_group.command(name="list")
@home_option
@json_option
def session_list(home: Path, json_: bool) -> None:
    """Every session of this host, open ones first (a lapsed lease shows as expired)."""
    from ..host.sessions import epoch_ms

    with _sessions(home) as sessions:
        rows = sessions.sessions()
    now_ms = epoch_ms(now())
    if json_:
        echo_json([r.to_dict(now_ms) for r in rows])
        return
    for r in rows:
        emit(
            printable(
                f"{r.session_id}  {r.state_at(now_ms):<7}  pool {r.pool}  project "
                f"{r.project or '-'}  {r.ruleset_rev}"
                + (f"  revoked by {r.revoked_rev}" if r.revoked_rev else "")
            )
        )
