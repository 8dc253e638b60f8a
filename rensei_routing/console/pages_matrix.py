"""The route-matrix page: every cell of one revision (:func:`~rensei_routing.ops.matrix.matrix_of`)
and, with ``against``, the cells that move between two revisions (the blast radius). Read-only:
revisions come through a read-only connection; the page owns only what it shows, the rules
are :mod:`rensei_routing.core.routing.matrix`'s (docs/route-matrix.md).

Query: ``rev`` (default: current), ``against`` (a revision: before = it, after = ``rev``),
``repo``, ``repo_class``, ``role``, ``face``, ``requirement`` (one value each; empty = the
axis's default). A bad value is a 400 page naming it; a revision that never existed is a 404.
"""

from __future__ import annotations

from ..core.routing.matrix import (
    CELL_COLUMNS,
    MAX_CELLS,
    UNMANAGED,
    BlastRadius,
    Matrix,
    MatrixCell,
)
from ..core.routing.policy import MAX_REVISION
from ..errors import MatrixError, NotFoundError
from ..ops.matrix import MatrixRequest, compare, load_set, matrix_of
from ..store.policies import PolicyStore
from .context import BadRequest, Console, NotFound, Query, int_param
from .html import esc, link, num, page, table, url

__all__ = ["matrix_page"]

_AXES = ("repo", "repo_class", "role", "face", "requirement")


def _cell(cell: MatrixCell) -> list[str]:
    d = cell.to_dict()
    req = cell.requirement
    return [
        esc(cell.repo or "-"),
        esc(d["repo_class"]),
        esc(cell.role),
        esc(cell.face),
        esc(f"{req.kind}:{req.value}"),
        f'<span class="outcome-{esc(cell.outcome)}">{esc(cell.outcome)}</span>',
        esc("-" if cell.outcome == UNMANAGED else cell.reason),
        esc(cell.provider or "-"),
        esc(cell.account or "-"),
        esc(cell.model or "-"),
        esc(cell.policy_id or "-"),
        esc("-" if cell.rung is None else cell.rung),
    ]


_HEAD = [column.replace("_", " ") for column in CELL_COLUMNS]


def _matrix_html(matrix: Matrix) -> str:
    counts = ", ".join(f"{num(n)} {esc(o)}" for o, n in matrix.counts().items())
    return (
        f'<p id="matrix-summary">Revision {matrix.revision}: {num(len(matrix.cells))} cells '
        f"({counts}).</p>"
        + table(_HEAD, (_cell(c) for c in matrix.cells), tid="matrix", numeric_from=99)
    )


def _radius_html(radius: BlastRadius) -> str:
    rows = []
    for change in radius.changes:
        rows.append(
            [
                *_cell(change.after)[:5],
                esc(change.before.summary()),
                esc(change.after.summary()),
                esc(change.becomes or "-"),
            ]
        )
    head = ["repo", "repo class", "role", "face", "requirement", "before", "after", "becomes"]
    return f'<p id="radius-summary">{esc(radius.summary())}.</p>' + (
        table(head, rows, tid="radius", numeric_from=99)
        if rows
        else '<p id="radius">No cell moves.</p>'
    )


def matrix_page(c: Console, q: Query) -> bytes:
    """The matrix of ``rev`` (or the blast radius from ``against`` to ``rev``)."""
    rev = int_param(q, "rev", maximum=MAX_REVISION)
    against = int_param(q, "against", maximum=MAX_REVISION)
    request = MatrixRequest(
        repo=q.get("repo") or None,
        repo_classes=(q["repo_class"],) if q.get("repo_class") else (),
        roles=(q["role"],) if q.get("role") else (),
        faces=(q["face"],) if q.get("face") else (),
        requirements=(q["requirement"],) if q.get("requirement") else (),
    )
    try:
        with c.read() as conn:
            store = PolicyStore(conn, vocabulary=c.vocabulary)
            shown = load_set(store.load, rev)
            before = None if against is None else load_set(store.load, against)
            if before is None:
                matrix = matrix_of(store.load, rev, request, vocabulary=c.vocabulary)
                radius = None
            else:
                matrix, radius = compare(before, shown, request, vocabulary=c.vocabulary)
    except NotFoundError as e:
        raise NotFound(str(e)) from e
    except MatrixError as e:
        raise BadRequest(str(e)) from e
    fields = "".join(
        f'<label>{esc(name)}<input name="{esc(name)}" id="f-{esc(name)}" '
        f'value="{esc(q.get(name, ""))}" size="12"></label>'
        for name in ("rev", "against", *_AXES)
    )
    form = (
        f'<form class="filters" method="get" action="/matrix">{fields}'
        '<button type="submit">Show</button></form>'
    )
    note = (
        "<p>Every cell is resolved against one revision in one batch, on the matrix host "
        "(no legacy route: a cell no policy claims is <em>unmanaged</em>); at most "
        f"{num(MAX_CELLS)} cells: narrow a larger matrix with the axes. "
        "See docs/route-matrix.md.</p>"
    )
    links = ""
    if radius is None and matrix.revision > 0:
        previous = url("/matrix", rev=matrix.revision, against=matrix.revision - 1)
        links = f"<p>{link(previous, f'Blast radius of revision {matrix.revision}')}</p>"
    if radius is None:
        body = form + note + links + _matrix_html(matrix)
        title = "Route matrix"
    else:
        body = form + note + _radius_html(radius)
        title = f"Blast radius: revision {radius.before_revision} → {radius.after_revision}"
    return page(title, "/matrix", body)
