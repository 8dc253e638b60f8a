"""The what-if page: a candidate against the current revision over every recorded context
(:func:`~rensei_routing.shadow.whatif.compare_chain`, run in the background up to the chain's
head when it starts): the counters, the before/after matrix and examples, each linking to its
decision. Candidates are what the home holds or was given: the candidate ``rensei quickstart``
evaluated (kept in the home), the files of the directory given at start (``--whatif-dir``),
and every stored revision but the current one (a revision against itself changes nothing,
and the page says so instead of comparing). Without a choice the page shows the first of
those. Owns what the page shows; :class:`~rensei_routing.console.state.WhatIfJobs` owns when
comparisons run.
"""

from __future__ import annotations

import json
import string
from contextlib import closing
from pathlib import Path
from typing import Final

from ..core._parse import STRICT_DECODER
from ..core.routing.policy import PolicySnapshot
from ..core.routing.validation import validate_policies
from ..core.shadow.whatif import COUNTERS, Example
from ..errors import InputError, NotFoundError
from ..files import read_limited
from ..store.audit import AuditLog
from ..store.policies import PolicyStore
from ..store.settings import QUICKSTART_CANDIDATE, read_text
from .context import BadRequest, Console, NotFound, Query, int_param
from .html import esc, link, num, page, table, url
from .state import WhatIfJob

__all__ = ["candidates", "whatif_page"]

#: The largest candidate file read.
MAX_FILE: Final = 16 * 1024 * 1024


def candidates(c: Console) -> list[str]:
    """The ``*.json`` files of the what-if directory, by name."""
    if c.whatif_dir is None:
        return []
    try:
        return sorted(p.name for p in Path(c.whatif_dir).glob("*.json") if p.is_file())
    except OSError:
        return []


def _candidate_file(c: Console, name: str) -> PolicySnapshot:
    if name not in candidates(c):
        raise NotFound(f"no candidate file {name!r} in the what-if directory")
    assert c.whatif_dir is not None
    path = Path(c.whatif_dir) / name
    try:
        doc = STRICT_DECODER.decode(read_limited(path, MAX_FILE).decode("utf-8"))
        snapshot = PolicySnapshot.from_dict(doc, vocabulary=c.vocabulary)
    except (OSError, ValueError, RecursionError, InputError) as e:
        raise BadRequest(f"{name}: not a policy file: {e}") from e
    if snapshot.state() != "ok":
        raise BadRequest(f"{name}: its declared content_hash does not match its policies")
    issues = validate_policies(snapshot.policies, vocabulary=c.vocabulary)
    if issues:
        raise BadRequest(
            f"{name}: {len(issues)} validation issue(s), first: {issues[0].policy_id or '-'}: "
            f"{issues[0].detail}"
        )
    return snapshot


def _kept_doc(c: Console) -> dict[str, object] | None:
    """The candidate ``rensei quickstart`` kept in the home (``{"file", "candidate"}``), or
    ``None`` when it kept none (or what it kept does not read as such)."""
    with c.read() as conn:
        text = read_text(conn, QUICKSTART_CANDIDATE)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("file"), str):
        return None
    return doc


def _kept_candidate(c: Console) -> PolicySnapshot:
    doc = _kept_doc(c)
    if doc is None:
        raise NotFound("this home keeps no candidate (rensei quickstart keeps the one it ran)")
    try:
        snapshot = PolicySnapshot.from_dict(doc.get("candidate"), vocabulary=c.vocabulary)
    except InputError as e:
        raise BadRequest(f"the candidate quickstart kept does not read: {e}") from e
    if snapshot.state() != "ok":
        raise BadRequest("the candidate quickstart kept does not match its content_hash")
    return snapshot


def _current(c: Console) -> tuple[PolicySnapshot, str]:
    with closing(c.home.connect(write=False)) as conn:
        loaded = PolicyStore(conn, vocabulary=c.vocabulary).load()
    return loaded.snapshot, loaded.state


def _revision(c: Console, revision: int) -> PolicySnapshot:
    with closing(c.home.connect(write=False)) as conn:
        try:
            loaded = PolicyStore(conn, vocabulary=c.vocabulary).load(revision)
        except NotFoundError as e:
            raise NotFound(str(e)) from e
    if loaded.state != "ok":
        raise BadRequest(f"revision {revision} does not load: {loaded.detail}")
    return loaded.snapshot


def _examples(examples: tuple[Example, ...]) -> str:
    return ", ".join(link(f"/decision/{e.seq}", f"seq {e.seq}") for e in examples)


class _Choice:
    """What the page compares: a query parameter naming it, its label and how to load it."""

    def __init__(self, key: str, label: str, params: dict[str, object]) -> None:
        self.key, self.label, self.params = key, label, params


def _choices(c: Console, current: int | None, revisions: list[int]) -> list[_Choice]:
    """Every candidate the page offers, the default first."""
    out = []
    kept = _kept_doc(c)
    if kept is not None:
        out.append(
            _Choice(
                "kept",
                f"the candidate quickstart evaluated ({kept['file']})",
                {"kept": "quickstart"},
            )
        )
    out += [_Choice(f"file:{f}", f, {"candidate": f}) for f in candidates(c)]
    out += [
        _Choice(f"rev:{r}", f"stored revision {r}", {"revision": r})
        for r in reversed(revisions)
        if r != current
    ]
    return out


def _pick_list(c: Console, choices: list[_Choice], current: int | None) -> str:
    out = ["<h2>Candidates</h2>"]
    if c.whatif_dir is None:
        out.append(
            "<p>No what-if directory was given (<code>rensei ui --whatif-dir DIR</code> offers "
            "its <code>*.json</code> files).</p>"
        )
    items = [f"<li>{link(url('/whatif', **ch.params), ch.label)}</li>" for ch in choices]
    if current is not None:
        items.append(
            f'<li id="current-revision">stored revision {current} is the current one (what '
            "every candidate is compared against)</li>"
        )
    out.append("<ul id=candidates>" + "".join(items) + "</ul>")
    return "".join(out)


def whatif_page(c: Console, q: Query) -> bytes:
    """Pick a candidate; show its comparison (progress while it runs)."""
    name = q.get("candidate", "")
    kept = q.get("kept", "")
    revision = int_param(q, "revision")
    again = int_param(q, "again")
    with c.read() as conn:
        history = PolicyStore(conn).history()
    current = history[-1].revision if history else None
    choices = _choices(c, current, [r.revision for r in history])
    pick = _pick_list(c, choices, current)
    parts: list[str] = []
    if not name and not kept and revision is None:
        if not choices:
            held = "no policy revision" if current is None else f"only revision {current}"
            body = (
                f'<p id="whatif-nothing">Nothing to compare yet: this home holds {held}'
                " and no candidate. Give candidate files with <code>rensei ui --whatif-dir "
                "DIR</code>, or save another revision (<code>rensei policy save FILE</code>).</p>"
            )
            return page("What-if", "/whatif", body + pick)
        default = choices[0]
        parts.append(
            f'<p id="whatif-default">Showing the first candidate this home offers: '
            f"{esc(default.label)}. Pick another below.</p>"
        )
        name = str(default.params.get("candidate", ""))
        kept = str(default.params.get("kept", ""))
        rev_param = default.params.get("revision")
        revision = rev_param if isinstance(rev_param, int) else None
    if revision is not None and revision == current and not name and not kept:
        body = (
            f'<p id="whatif-same">Stored revision {revision} is the current revision: compared '
            "with itself nothing would change, so nothing is compared. Pick a candidate below."
            "</p>"
        )
        return page("What-if", "/whatif", body + pick)
    if name:
        label = f"candidate file {name}"
        _candidate_file(c, name)  # refuse a bad file before starting
        job = c.whatif.get(
            f"file:{name}", lambda: _current(c), lambda: _candidate_file(c, name), again=again
        )
    elif kept:
        if kept != "quickstart":
            raise BadRequest(f"kept: {kept!r} is not a kept candidate (quickstart)")
        doc = _kept_doc(c)
        _kept_candidate(c)
        label = f"the candidate quickstart evaluated ({doc['file'] if doc else '?'})"
        job = c.whatif.get("kept", lambda: _current(c), lambda: _kept_candidate(c), again=again)
    else:
        assert revision is not None
        label = f"stored revision {revision}"
        _revision(c, revision)
        job = c.whatif.get(
            f"rev:{revision}", lambda: _current(c), lambda: _revision(c, revision), again=again
        )
    parts.append(
        f'<p id="comparing">Comparing <strong>{esc(label)}</strong> against the current '
        "revision over every context recorded when the comparison started.</p>"
    )
    if job is None:
        parts.append(
            '<div class="banner warn" id="whatif-busy">The console is busy: '
            f"{num(c.whatif.pending())} comparison(s) are running or waiting (one runs at a "
            "time). This page asks again every 5 s.</div>"
        )
        return page("What-if", "/whatif", "".join(parts) + pick, refresh_s=5)
    if job.done is None:
        parts.append(_progress(job))
        return page("What-if", "/whatif", "".join(parts) + pick, refresh_s=2)
    if job.error is not None or job.summary is None:
        parts.append(f'<div class="banner fail">The comparison failed: {esc(job.error)}</div>')
        parts.append(f"<p>{_again(q, job, 'Try again')}</p>")
        return page("What-if", "/whatif", "".join(parts) + pick)
    parts += _result(c, q, job, current)
    return page("What-if", "/whatif", "".join(parts) + pick)


def _progress(job: WhatIfJob) -> str:
    if job.started is None:
        return (
            f'<p id="whatif-running">Queued at {job.requested:%H:%M:%S} UTC (comparisons run '
            "one at a time); this page reloads until it is done.</p>"
        )
    upto = "" if job.stop is None else f" over the {num(job.stop)} record(s) below seq {job.stop}"
    return (
        f'<p id="whatif-running">Running since {job.started:%H:%M:%S} UTC{upto}; this page '
        "reloads until it is done.</p>"
    )


def _again(q: Query, job: WhatIfJob, text: str) -> str:
    """A link running ``job``'s comparison again (once: see :meth:`WhatIfJobs.get`)."""
    params = {k: v for k, v in q.items() if k in ("candidate", "kept", "revision")}
    return link(url("/whatif", **params, again=job.number), text, cls="again")


def _result(c: Console, q: Query, job: WhatIfJob, current: int | None) -> list[str]:
    s = job.summary
    assert s is not None and job.done is not None and job.stop is not None
    parts = [
        f'<p id="whatif-done">{num(s.contexts)} recorded context(s) below seq '
        f'<span id="whatif-stop">{job.stop}</span> against current revision '
        f"{job.current_revision}; finished {job.done:%H:%M:%S} UTC"
        + (f"; {num(job.skipped)} record(s) carry no readable context" if job.skipped else "")
        + ".</p>"
    ]
    with AuditLog.open(c.home) as log:
        head = log.head()[0]
    stale = []
    if head > job.stop:
        stale.append(
            f'<span id="whatif-appended">{num(head - job.stop)}</span> record(s) appended '
            "since are not in these figures"
        )
    if current is not None and current != job.current_revision:
        stale.append(f"the current revision is now {current}")
    if stale:
        again = _again(q, job, "Compare again up to the current head")
        parts.append(f'<p class="muted" id="whatif-since">{"; ".join(stale)}. {again}</p>')
    ex = dict(s.examples)
    parts.append(
        table(
            ["counter", "spawns", "examples"],
            ([esc(k.replace("_", " ")), num(s.count(k)), _examples(ex[k])] for k in COUNTERS),
            tid="counters",
            numeric_from=1,
        )
    )
    labels = sorted({cell.before for cell in s.cells} | {cell.after for cell in s.cells})
    codes = {lab: string.ascii_uppercase[i] if i < 26 else str(i) for i, lab in enumerate(labels)}
    grid = {(cell.before, cell.after): cell for cell in s.cells}
    parts.append("<h2>Move matrix (before ↓, after →)</h2>")
    parts.append(
        table(
            ["code", "outcome/reason"],
            ([codes[lab], esc(lab)] for lab in labels),
            tid="codes",
            numeric_from=99,
        )
    )
    parts.append(
        table(
            ["before \\ after", *(codes[a] for a in labels)],
            (
                [codes[b]] + [num(grid[(b, a)].count) if (b, a) in grid else "." for a in labels]
                for b in labels
            ),
            tid="matrix",
        )
    )
    changed = [cell for cell in s.cells if cell.changed]
    if changed:
        parts.append("<h2>Changed cells</h2>")
        parts.append(
            table(
                ["before", "after", "changed", "of", "examples"],
                (
                    [
                        esc(cell.before),
                        esc(cell.after),
                        num(cell.changed),
                        num(cell.count),
                        _examples(cell.examples),
                    ]
                    for cell in changed
                ),
                tid="changed",
                numeric_from=2,
            )
        )
    return parts
