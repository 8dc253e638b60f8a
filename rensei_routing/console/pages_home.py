"""The overview and policies pages: the home at a glance (org, policy revision, snapshot line,
chain status, doctor's checks), and the policy revision history with a diff between two
revisions.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import shlex
from pathlib import Path
from typing import Any

from ..core.snapshot.freshness import format_age
from ..errors import NotFoundError, RenseiRoutingError
from ..host.cache import host_cache
from ..host.status import host_status_data, snapshot_line
from ..ops.quickstart import MARKER
from ..store.audit import AuditLog
from ..store.policies import PolicyStore
from ..store.snapshots import SnapshotStore
from .context import Console, NotFound, Query, int_param
from .html import esc, link, num, page, table, url
from .state import DOCTOR_RERUN_S
from .verdict import chain_state

__all__ = ["overview_page", "policies_page"]


def _facts(rows: list[tuple[str, str]], did: str) -> str:
    return (
        f'<dl class="facts" id="{did}">'
        + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in rows)
        + "</dl>"
    )


def _renew_hint(c: Console, status: dict[str, Any], what: str) -> str:
    """The command that renews this home's cached snapshot: quickstart again for a quickstart
    home, ``host sync`` from the remembered source, else ``host sync`` from a new one."""
    home = shlex.quote(str(c.home.path))
    if (Path(c.home.path) / MARKER).is_file():
        return (
            f"{what}: <code>rensei quickstart --home {esc(home)}</code> again (it recreates "
            "this quickstart home with a fresh snapshot)"
        )
    source = status.get("source") or {}
    if source.get("endpoint"):
        return (
            f"{what}: <code>rensei host sync --home {esc(home)}</code> (fetches from "
            f"{esc(source['endpoint'])}), or keep <code>rensei host run</code> polling"
        )
    if source.get("file"):
        return (
            f"{what}: <code>rensei host sync --home {esc(home)}</code> once a newer "
            f"<code>rensei snapshot export</code> is in {esc(source['file'])}"
        )
    return (
        f"{what}: <code>rensei host sync --home {esc(home)} --endpoint URL</code> (a "
        "<code>rensei serve</code>) or <code>--from FILE</code> (a <code>rensei snapshot "
        "export</code>)"
    )


def _snapshot_rows(c: Console) -> list[tuple[str, str]]:
    """The host cache's ``Ruleset snapshot:`` line (age, degraded or expired: said once, by the
    state in front), the command that renews a snapshot that is not fresh, and the latest
    snapshot this home compiled."""
    now = c.clock()
    rows = []
    try:
        status = host_status_data(host_cache(Path(c.home.path)), now=now)
        line = snapshot_line(status).removeprefix("Ruleset snapshot: ")
        snap = status.get("snapshot") or {}
        state = snap.get("state", "none")
        line = line.removesuffix(" (degraded)").replace(f" ({state}: refusing", "; refusing")
        cls = {"fresh": "ok", "degraded": "warn"}.get(state, "fail" if snap else "warn")
        renew = (
            ""
            if state == "fresh"
            else '<br><span class="muted" id="snapshot-renew">'
            + _renew_hint(c, status, "to cache one" if not snap else "to renew it")
            + "</span>"
        )
        rows.append(
            (
                "host snapshot",
                f'<span class="status {cls}" id="snapshot-state">{esc(state)}</span> '
                f'<span id="snapshot-line">{esc(line)}</span>{renew}',
            )
        )
    except RenseiRoutingError as e:
        rows.append(("host snapshot", f'<span class="status fail">unreadable</span> {esc(e)}'))
    try:
        with c.read() as conn:
            store = SnapshotStore(conn, org_id=c.home.info().org)
            history = store.history() if store.compiled_from() is not None else []
        if history:
            latest = history[-1]
            age = ""
            try:
                moment = dt.datetime.fromisoformat(latest.compiled_at.replace("Z", "+00:00"))
                age = f" (age {format_age(max(0, int((now - moment).total_seconds() * 1000)))})"
            except ValueError:
                pass
            rows.append(
                (
                    "compiled snapshot",
                    esc(f"{latest.ruleset_rev} compiled at {latest.compiled_at}{age}"),
                )
            )
        else:
            rows.append(("compiled snapshot", "none compiled (control side unused)"))
    except RenseiRoutingError as e:
        rows.append(("compiled snapshot", f"unreadable: {esc(e)}"))
    return rows


def overview_page(c: Console, q: Query) -> bytes:
    """Home, org, policy revision, snapshot, chain status, doctor's checks."""
    info = c.home.info()
    with c.read() as conn:
        head_rev = PolicyStore(conn).head()
        checkpoints = conn.execute(
            "SELECT size, head_hash FROM audit_checkpoints ORDER BY size DESC, id DESC LIMIT 1"
        ).fetchone()
        revisions = int(conn.execute("SELECT count(*) FROM policy_revisions").get or 0)
    with AuditLog.open(c.home, read_only=True) as log:
        head = log.head()
        present = log.count()
    status, text = chain_state(c, head)
    home_rows = [
        ("home", esc(c.home.path)),
        ("org", f'<span id="org">{esc(info.org)}</span>'),
        ("host key", esc(info.key_id)),
        (
            "policy revision",
            "none saved"
            if head_rev is None
            else f'<span id="policy-revision">{head_rev[0]}</span> ({esc(head_rev[1])}; '
            f"{link('/policies', f'{num(revisions)} revision(s)')})",
        ),
        *_snapshot_rows(c),
    ]
    chain_rows = [
        (
            "records",
            f'<span id="chain-records">{num(present)}</span>'
            + (
                f" (seq {num(head[0] - present)}..{num(head[0] - 1)}: the records below were "
                "pruned after their export)"
                if 0 < present < head[0]
                else ""
            ),
        ),
        (
            "last checkpoint",
            "none"
            if checkpoints is None
            else f'<span id="last-checkpoint">{num(int(checkpoints[0]))}</span> records, head '
            f"{esc(str(checkpoints[1])[:16])}…",
        ),
        (
            "verification",
            f'<span class="status {status}" id="chain-status">{esc(status)}</span> '
            f'<span id="chain-detail">{esc(text)}</span>',
        ),
    ]
    parts = [
        "<h2>Home</h2>",
        _facts(home_rows, "home-facts"),
        "<h2>Audit chain</h2>",
        _facts(chain_rows, "chain-facts"),
        f"<p>{link('/audit', 'Browse the chain')} · {link('/shadow', 'Shadow agreement')}</p>",
        "<h2>Doctor</h2>",
    ]
    checks, at = c.doctor.checks, c.doctor.at
    if checks is None:
        parts.append(
            '<p id="doctor-pending">Doctor is running; its checks show here when done.</p>'
        )
    else:
        assert at is not None
        ago = format_age(max(0, int((c.clock() - at).total_seconds() * 1000)))
        parts.append(
            f'<p class=muted id="doctor-at">Checked at {at:%Y-%m-%d %H:%M:%S} UTC, {ago} ago; '
            "doctor runs again when the chain changes (at most once a minute) and at least "
            f"every {DOCTOR_RERUN_S / 60:g} min.</p>"
        )
        parts.append(
            table(
                ["check", "status", "detail"],
                (
                    [
                        esc(k.name),
                        f'<span class="status {k.status}">{esc(k.status)}</span>',
                        esc(k.detail),
                    ]
                    for k in checks
                ),
                tid="doctor",
                numeric_from=99,
            )
        )
    refresh = 5 if checks is None or c.verifier.last is None else None
    return page("Overview", "/", "".join(parts), refresh_s=refresh)


def _policies_text(store: PolicyStore, revision: int) -> list[str]:
    try:
        loaded = store.load(revision)
    except NotFoundError as e:
        raise NotFound(str(e)) from e
    doc: Any = [p.to_dict() for p in loaded.snapshot.policies]
    return json.dumps(doc, indent=2, sort_keys=True).splitlines()


def policies_page(c: Console, q: Query) -> bytes:
    """Revision history and the diff between revisions ``a`` and ``b``."""
    a = int_param(q, "a")
    b = int_param(q, "b")
    with c.read() as conn:
        store = PolicyStore(conn)
        history = store.history()
        diff_html = ""
        if history:
            latest = history[-1].revision
            b = latest if b is None else b
            a = (b - 1 if b > 1 else b) if a is None else a
            before, after = _policies_text(store, a), _policies_text(store, b)
            lines = list(
                difflib.unified_diff(before, after, f"revision {a}", f"revision {b}", lineterm="")
            )
            diff_html = f'<h2 id="diff-title">Diff: revision {a} → revision {b}</h2>' + (
                f'<pre id="diff">{esc(chr(10).join(lines))}</pre>'
                if lines
                else '<p id="diff">No difference.</p>'
            )
    rows = []
    for r in reversed(history):
        prev = r.revision - 1
        rows.append(
            [
                f'<span class="rev">{r.revision}</span>',
                esc(r.saved_at),
                "-" if r.policy_count is None else num(r.policy_count),
                esc(r.content_hash),
                link(url("/policies", a=prev, b=r.revision), f"diff {prev} → {r.revision}")
                if prev >= 1
                else "",
            ]
        )
    form = (
        '<form class="filters" method="get" action="/policies">'
        f'<label>from<input name="a" id="f-a" value="{esc(a or "")}" size="5"></label>'
        f'<label>to<input name="b" id="f-b" value="{esc(b or "")}" size="5"></label>'
        '<button type="submit">Diff</button></form>'
    )
    body = (
        "<h2>Revisions</h2>"
        + (
            table(
                ["revision", "saved", "policies", "content hash", ""],
                rows,
                tid="revisions",
                numeric_from=99,
            )
            if rows
            else "<p>No policy revision saved yet (<code>rensei policy save FILE</code>).</p>"
        )
        + (form + diff_html if history else "")
    )
    return page("Policies", "/policies", body)
