"""The what-if page: a candidate policy file from the directory given at start
(``--whatif-dir``), or any stored revision, against the current revision over every recorded
context (:func:`~rensei_routing.shadow.whatif.compare_chain`, run in the background): the
counters, the before/after matrix and examples, each linking to its decision.
"""

from __future__ import annotations

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
from ..store.policies import PolicyStore
from .context import BadRequest, Console, NotFound, Query, int_param
from .html import esc, link, num, page, table, url

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


def whatif_page(c: Console, q: Query) -> bytes:
    """Pick a candidate; show its comparison (progress while it runs)."""
    name = q.get("candidate", "")
    revision = int_param(q, "revision")
    with c.read() as conn:
        history = PolicyStore(conn).history()
    files = candidates(c)
    pick = ["<h2>Candidates</h2>"]
    if c.whatif_dir is None:
        pick.append(
            "<p>No what-if directory was given (<code>rensei ui --whatif-dir DIR</code>)."
            " Stored revisions can be compared:</p>"
        )
    pick.append(
        "<ul id=candidates>"
        + "".join(f"<li>{link(url('/whatif', candidate=f), f)}</li>" for f in files)
        + "".join(
            f"<li>{link(url('/whatif', revision=r.revision), f'stored revision {r.revision}')}</li>"
            for r in reversed(history)
        )
        + "</ul>"
    )
    if not name and revision is None:
        return page("What-if", "/whatif", "".join(pick))
    if name:
        label = f"candidate file {name}"
        _candidate_file(c, name)  # refuse a bad file before starting
        job = c.whatif.get(f"file:{name}", lambda: _current(c), lambda: _candidate_file(c, name))
    else:
        assert revision is not None
        label = f"stored revision {revision}"
        _revision(c, revision)
        job = c.whatif.get(f"rev:{revision}", lambda: _current(c), lambda: _revision(c, revision))
    parts = [
        f'<p id="comparing">Comparing <strong>{esc(label)}</strong> against the current '
        "revision over every recorded context.</p>"
    ]
    if job.done is None:
        parts.append(
            f'<p id="whatif-running">Running since {job.started:%H:%M:%S} UTC; this page '
            "reloads until it is done.</p>"
        )
        return page("What-if", "/whatif", "".join(parts + pick), refresh_s=2)
    if job.error is not None or job.summary is None:
        parts.append(f'<div class="banner fail">The comparison failed: {esc(job.error)}</div>')
        return page("What-if", "/whatif", "".join(parts + pick))
    s = job.summary
    parts.append(
        f"<p>{num(s.contexts)} recorded context(s) against current revision "
        f"{job.current_revision}; finished {job.done:%H:%M:%S} UTC"
        + (f"; {num(job.skipped)} record(s) carry no readable context" if job.skipped else "")
        + ".</p>"
    )
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
    return page("What-if", "/whatif", "".join(parts + pick))
