"""``rensei org ...`` and ``rensei snapshot ...``: the control side of ruleset snapshots. Load
and show the org's live data; compile, show, export and verify signed snapshots. Holds no
snapshot rules (core) and no SQL (store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import click

from .. import signing
from ..control.snapshots import (
    compile_snapshot,
    control_store,
    source_revisions,
    validator_results,
)
from ..core.snapshot.envelope import (
    SCOPE_HEADER,
    SIGNATURE_SCOPES,
    compiled_moment,
    verify_snapshot,
)
from ..core.snapshot.freshness import format_age
from ..core.snapshot.org import OrgData
from ..errors import KeyFormatError, RenseiRoutingError
from ..files import atomic_write, read_limited
from ..plugins.manager import snapshot_validators
from ..store.home import Home
from ._clock import now, now_text
from ._inputs import SOURCE, _named, read_document
from ._output import emit, next_step, note, printable
from ._root import (
    CommandError,
    cli,
    echo_json,
    home_option,
    json_option,
    unused_home_option,
)
from ._session import session
from ._store import home_of, refuse_home_target, require_output_dir

_REV = click.IntRange(min=1, max=2**53 - 1)

#: ``snapshot events``' header line (its text output's columns).
EVENTS_HEADER: Final = ("seq", "at", "kind", "revision", "content_hash")


@cli.group(name="org")
def org() -> None:
    """The org's live data: capacity profiles and grants, pools and hosts, cells, posteriors."""


@org.command(name="load")
@click.argument("source", type=SOURCE, metavar="FILE")
@home_option
def org_load(source: str, home: Path) -> None:
    """Validate FILE (or -) and store it as the org's current data (nothing written on error;
    data identical to the current revision is a no-op that says so)."""
    doc, label = read_document(source)
    data = _named(label, OrgData.from_dict, doc)
    with control_store(home_of(home), write=True) as store:
        revision, created = store.save_org(data, saved_at=now_text())
    if not created:
        note(
            f"org data unchanged: identical to revision {revision}; nothing saved, nothing to "
            f"recompile"
        )
        return
    note(
        f"saved org data revision {revision}: {len(data.profiles):,} profile(s), "
        f"{len(data.grants):,} grant(s), {len(data.pools):,} pool(s), {len(data.hosts):,} host(s), "
        f"{len(data.providers):,} provider(s), {len(data.model_profiles):,} model profile(s), "
        f"{len(data.cells):,} cell(s), {len(data.posteriors):,} posterior(s)"
    )


@org.command(name="show")
@home_option
@json_option
def org_show(home: Path, json_: bool) -> None:
    """Show the org's current data (normalised: every list sorted by its key)."""
    with control_store(home_of(home)) as store:
        revision, data = store.load_org()
    if json_:
        echo_json({"revision": revision, **data.to_dict()})
        return
    emit(printable(f"org data revision {revision}"))
    for pool in data.pools:
        emit(printable(f"  pool {pool['id']:<24} {pool['status']}"))
    for prof in data.profiles:
        emit(printable(f"  profile {prof['id']:<21} pools: {', '.join(prof['poolIds']) or '-'}"))
    for grant in data.grants:
        project = grant.get("projectId") or "*"
        emit(printable(f"  grant {grant['profileId']:<23} project: {project}"))
    emit(
        printable(
            f"  {len(data.hosts):,} host(s), {len(data.providers):,} provider(s), "
            f"{len(data.cells):,} cell(s), {len(data.posteriors):,} posterior(s)"
        )
    )
    auth = data.authorization
    if auth is not None:
        emit(
            printable(
                f"  authorization: {len(auth['cedarPolicies']):,} Cedar policy(ies), schema "
                f"{'declared' if auth['cedarSchema'] is not None else 'none'}, default-permit "
                f"{'declared' if auth['defaultPermit'] else 'off'}"
            )
        )


@cli.group(name="snapshot")
def snapshot() -> None:
    """Signed ruleset snapshots: compile, show, history, export, verify."""


@snapshot.command(name="compile")
@home_option
@json_option
def snapshot_compile(home: Path, json_: bool) -> None:
    """Compile the current policies and org data into the next signed snapshot (signature over
    the content hash, headerSignature over the header). A failing validator publishes nothing
    and is named (exit 1)."""
    ctx = session()
    result = compile_snapshot(
        home_of(home),
        compiled_at=now_text(),
        validators=snapshot_validators(ctx.pm),
        vocabulary=ctx.vocabulary(),
    )
    snap = result.snapshot
    if json_:
        echo_json(
            {
                "rulesetRev": snap.ruleset_rev,
                "contentHash": snap.content_hash,
                "compiledAt": snap.compiled_at,
                "signingKeyId": snap.header.signing_key_id,
                "validators": validator_results(result.validators),
            }
        )
    else:
        note(
            f"compiled {snap.ruleset_rev} (content {snap.content_hash[:16]}..., signed by "
            f"{snap.header.signing_key_id}; {len(result.validators):,} validator(s) passed)"
        )
    _empty_inputs(home_of(home))


def _empty_inputs(h: Home) -> None:
    """Say what to load when a compile had no policy revision or no org data to read."""
    policy_rev, org_rev = source_revisions(h)
    if not policy_rev:
        next_step(
            "no policy revision is saved, so the snapshot routes nothing", "rensei policy save FILE"
        )
    if not org_rev:
        next_step(
            "no org data is loaded, so the snapshot grants no pool (every claim is refused)",
            "rensei org load FILE",
        )


@snapshot.command(name="show")
@click.option("--rev", "revision", type=_REV, default=None, help="A revision (default: latest).")
@home_option
@json_option
def snapshot_show(revision: int | None, home: Path, json_: bool) -> None:
    """Show a stored snapshot, verified against the home's key."""
    h = home_of(home)
    with control_store(h) as store:
        snap = store.load_snapshot(revision, lookup=h.snapshot_lookup())
    if json_:
        echo_json(snap.to_dict())
        return
    age = format_age(int((now() - compiled_moment(snap)).total_seconds() * 1000))
    emit(printable(f"{snap.ruleset_rev}  compiled {snap.compiled_at} ({age} ago)"))
    emit(printable(f"  content hash  {snap.content_hash}"))
    emit(printable(f"  signed by     {snap.header.signing_key_id} ({snap.header.algorithm})"))
    emit(printable(f"  validators    {', '.join(snap.validators) or '-'}"))
    bundle = snap.sections.get("policyBundle") or {}
    emit(
        printable(
            f"  policies      revision {bundle.get('revision')}, "
            f"{len(bundle.get('policies') or []):,} policy(ies)"
        )
    )


@snapshot.command(name="history")
@home_option
@json_option
def snapshot_history(home: Path, json_: bool) -> None:
    """Every compiled snapshot, oldest first."""
    h = home_of(home)
    with control_store(h) as store:
        rows = store.snapshot_history()
    if json_:
        echo_json([r.to_dict() for r in rows])
        return
    for r in rows:
        emit(
            printable(
                f"{r.ruleset_rev:<28} {r.compiled_at}  {r.content_hash[:16]}...  {r.size:,} B"
            )
        )


@snapshot.command(name="export")
@click.argument("target", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--rev", "revision", type=_REV, default=None, help="A revision (default: latest).")
@home_option
def snapshot_export(target: Path, revision: int | None, home: Path) -> None:
    """Write the exact served bytes of a snapshot to FILE (the air-gap path), atomically."""
    h = home_of(home)
    require_output_dir(target)
    with control_store(h) as store:
        data = store.envelope(revision)
    snap = verify_snapshot(data, lookup=h.snapshot_lookup())
    refuse_home_target(h, target)
    try:
        atomic_write(target, data)
    except OSError as e:
        raise CommandError(f"cannot write {target}: {e.strerror or e}") from e
    note(f"exported {snap.ruleset_rev} to {target} ({len(data):,} bytes)")


@snapshot.command(name="verify")
@click.argument("source", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--trust",
    "trust",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A trusted public key file (ed25519:<base64>); repeatable; KEYFILE=KID trusts it "
    "under an opaque key id.",
)
@click.option(
    "--scope",
    type=click.Choice(SIGNATURE_SCOPES),
    default=SCOPE_HEADER,
    show_default=True,
    help="header: require headerSignature; hash-only: accept a signature over the hash alone.",
)
@unused_home_option
@json_option
def snapshot_verify(source: Path, trust: tuple[Path, ...], scope: str, json_: bool) -> None:
    """Check a snapshot file independently against trusted public keys; say why it fails."""
    keys: dict[str, signing.PublicKey] = {}
    try:
        for given in trust:
            path, _, kid = ("", "", "") if given.is_file() else str(given).rpartition("=")
            path = path or str(given)
            key = signing.load_public_key(Path(path))
            if kid and not signing.valid_key_id(kid):
                raise CommandError(f"--trust {given}: {kid!r} is not 1..128 of [A-Za-z0-9._:-]")
            keys[kid or key.key_id] = key
    except KeyFormatError as e:
        raise CommandError(str(e)) from e
    try:
        data = read_limited(source, 64 * 1024 * 1024)
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot read {source}: {e}") from e
    try:
        snap = verify_snapshot(
            data, lookup=signing.key_lookup_by_id(keys), scope_of=lambda kid: scope
        )
    except RenseiRoutingError as e:
        if json_:
            echo_json({"ok": False, "error": str(e)})
        raise CommandError(f"{source}: {e}") from e
    if json_:
        echo_json(
            {
                "ok": True,
                "rulesetRev": snap.ruleset_rev,
                "contentHash": snap.content_hash,
                "compiledAt": snap.compiled_at,
                "signingKeyId": snap.header.signing_key_id,
                "signatureScope": snap.signature_scope,
            }
        )
        return
    emit(
        printable(
            f"ok: {snap.ruleset_rev} compiled {snap.compiled_at} ({snap.signature_scope}), content "
            f"{snap.content_hash[:16]}..., signed by trusted key {snap.header.signing_key_id}"
        )
    )


@snapshot.command(name="events")
@click.option(
    "--after", "after", type=click.IntRange(min=0), default=0, help="Only records after SEQ."
)
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=100_000),
    default=1000,
    show_default=True,
    help="At most this many records.",
)
@home_option
@json_option
def snapshot_events(after: int, limit: int, home: Path, json_: bool) -> None:
    """The control side's audit records, oldest first: every policy save, org load, compile
    and re-seal, each committed with its write (in PostgreSQL for a --store home). Text: a
    header line, then one tab-separated line per record: seq, at, kind, revision,
    content_hash."""
    with control_store(home_of(home)) as store:
        events = store.events(after=after, limit=limit)
    if json_:
        echo_json([e.to_dict() for e in events])
        return
    emit("\t".join(EVENTS_HEADER))
    for e in events:
        cells = (str(e.seq), e.at, e.kind, str(e.revision), e.content_hash)
        emit("\t".join(printable(c) for c in cells))
