"""Reading the CLI's input documents: policy files, context documents, JSON Lines batches; and
the argument types and options several commands share (``SOURCE``, ``SEQ``, ``--format``,
``--rev``).

Every failure is a typed :class:`InputError` whose message names the source (file, line,
``<stdin>``, ``<inline>``) and, for a well-formed document of the wrong shape, the field path.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from ..core._parse import STRICT_DECODER
from ..core.routing._quick import Memo, Pieces, quick_context, quick_line
from ..core.routing.context import RouteContext
from ..core.routing.policy import PolicySnapshot, hash_policies
from ..core.routing.vocabulary import DEFAULT_VOCABULARY, Vocabulary
from ..errors import InputError, MalformedError, UnknownSeamError

if TYPE_CHECKING:
    from ..core.shadow.spawn import Spawn
    from ..plugins.manager import SeamRegistry

    # click's parameter types are generic from 8.2 on; 8.1 (the oldest click setup.cfg allows)
    # cannot subscript them at run time, so the subscript is for the type checker only.
    _StrParam = click.ParamType[str, Any]
    _TimeParam = click.ParamType[dt.datetime, Any]
    _IntParam = click.ParamType[int, Any]
else:
    _StrParam = _TimeParam = _IntParam = click.ParamType

T = TypeVar("T")

#: The whitespace JSON allows between tokens (RFC 8259): a line of only these is blank.
_JSON_WHITESPACE = " \t\r\n"


def parse_json(text: str, source: str) -> Any:
    """One JSON document. Refuses duplicate keys and NaN/Infinity; a number too long to convert
    or nesting too deep to parse is a clear error, not a traceback.

    Raises:
        MalformedError: naming ``source``.
    """
    try:
        return STRICT_DECODER.decode(text)
    except RecursionError as e:
        raise MalformedError(source, "not valid JSON: nested too deeply") from e
    except ValueError as e:  # JSONDecodeError, duplicate keys, over-long integers
        raise MalformedError(source, f"not valid JSON: {e}") from e


def _read_text(source: str) -> str:
    """The UTF-8 text of a file or of stdin (``-``), read as bytes and decoded here, whatever
    the locale says, so bad bytes are an :class:`InputError` rather than a traceback."""
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {_label(source)}: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = f"byte 0x{data[e.start]:02x} at offset {e.start}"
        raise InputError(f"cannot read {_label(source)}: not UTF-8 ({bad})") from e


def _named(source: str, build: Callable[[Any], T], doc: Any) -> T:
    """``build(doc)``, with the source prefixed to a field-path error."""
    try:
        return build(doc)
    except MalformedError as e:
        raise MalformedError(f"{source}: {e.path}", e.message) from e


def _label(source: str) -> str:
    return "<stdin>" if source == "-" else source


class SourceType(_StrParam):
    """A document argument that may be a file path, ``-`` (stdin) or inline JSON: a path that
    names a directory is a usage error (exit 2), exactly as ``click.Path(dir_okay=False)``
    says it for every other file argument, so a directory where a file is expected exits 2
    from every command."""

    name = "FILE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text.lstrip().startswith(("{", "[", '"')) and text != "-" and Path(text).is_dir():
            self.fail(f"File {text!r} is a directory.", param, ctx)
        return text


#: A document argument: a file, ``-`` or inline JSON (see :class:`SourceType`).
SOURCE = SourceType()

#: A seq of the audit log on the command line: 0 to 2**63 - 1 (SQLite's largest integer).
SEQ = click.IntRange(min=0, max=2**63 - 1)
#: ``--format``: the interop format of a file a command imports or exports.
INTEROP_FORMAT = click.option(
    "format_",
    "--format",
    type=click.Choice(("hydraflow",)),
    required=True,
    help="The source's format: hydraflow (docs/interop.md).",
)
#: ``--rev N``: a stored policy revision (default: the current one).
POLICY_REVISION = click.option(
    "--rev",
    "revision",
    type=click.IntRange(min=1, max=2**63 - 1),
    help="Revision (default: current).",
)


def read_document(source: str) -> tuple[Any, str]:
    """A JSON document and its label, from a file path, ``-`` (stdin), or inline JSON text
    (anything starting with ``{``, ``[`` or ``"``)."""
    if source.lstrip().startswith(("{", "[", '"')):
        return parse_json(source, "<inline>"), "<inline>"
    label = _label(source)
    return parse_json(_read_text(source), label), label


def read_json(source: str | Path) -> tuple[Any, str]:
    """The JSON document in a file (or ``-``, stdin) and its label; never inline text.

    Raises:
        MalformedError: not JSON; InputError: unreadable or not UTF-8.
    """
    label = _label(str(source))
    return parse_json(_read_text(str(source)), label), label


def read_policy_file(
    source: str | Path, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> PolicySnapshot:
    """A policy file (or ``-``): an array of policies, or ``{"policies": [...]}`` with optional
    ``revision`` and ``content_hash``.

    Raises:
        InputError: unreadable, not JSON, or not a policy set (the message names the field).
    """
    label = _label(str(source))
    doc = parse_json(_read_text(str(source)), label)
    return _named(label, partial(PolicySnapshot.from_dict, vocabulary=vocabulary), doc)


def read_verified_policy_file(
    source: str | Path, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> PolicySnapshot:
    """A policy file whose declared ``content_hash``, if any, matches its policies.

    Raises:
        InputError: as :func:`read_policy_file`, or the declared hash is not the policies' own
            (a file that claims a hash it does not have is never validated or saved).
    """
    snapshot = read_policy_file(source, vocabulary=vocabulary)
    if snapshot.state() != "ok":
        raise InputError(
            f"{_label(str(source))}: declared content_hash {snapshot.content_hash} does not "
            f"match its policies ({hash_policies(snapshot.policies)})"
        )
    return snapshot


def read_context(source: str, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY) -> RouteContext:
    """Raises: InputError."""
    doc, label = read_document(source)
    return _named(label, partial(RouteContext.from_dict, vocabulary=vocabulary), doc)


def read_context_lines(
    source: str | Path, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> list[RouteContext]:
    """Every context of a JSON Lines file (blank lines skipped), all parsed before any is used.

    Lines end at ``\\n`` only (a ``\\r`` before it is JSON whitespace): ``str.splitlines``
    would also split inside a string holding U+2028, U+2029 or U+0085, which JSON allows raw.

    Raises:
        InputError: naming the line number and the field of the first bad line.
    """
    return list(iter_context_lines(str(source), vocabulary=vocabulary))


def iter_context_lines(
    source: str, *, vocabulary: Vocabulary = DEFAULT_VOCABULARY
) -> Iterator[RouteContext]:
    """The contexts of a JSON Lines file (``-``: stdin), one at a time as the file is read, in
    constant memory: blank lines skipped, lines ending at ``\\n`` only (as
    :func:`read_context_lines`).

    Raises:
        InputError: naming the line number and the field of the first bad line, or the byte
            offset of the first byte that is not UTF-8.
    """
    label = _label(source)
    build = partial(RouteContext.from_dict, vocabulary=vocabulary)
    try:
        f = sys.stdin.buffer if source == "-" else open(source, "rb")  # noqa: SIM115
    except OSError as e:
        raise InputError(f"cannot read {label}: {e.strerror or e}") from e
    offset = 0
    memo: Memo = {}
    pieces = Pieces()
    try:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad = f"byte 0x{raw[e.start]:02x} at offset {offset + e.start}"
                raise InputError(f"cannot read {label}: not UTF-8 ({bad})") from e
            offset += len(raw)
            # A line as to_dict writes it is read without its dicts; any other (or anything
            # that reader is unsure of) is parsed, then read by the quick reader, sharing
            # repeated pieces across the batch, or by the general one, which names the field.
            ctx = quick_line(line, vocabulary, memo, pieces)
            if ctx is None and line.strip(_JSON_WHITESPACE):
                where = f"{label}:{number}"
                doc = parse_json(line, where)
                ctx = quick_context(doc, vocabulary, memo) or _named(where, build, doc)
            if ctx is not None:
                yield ctx
    except OSError as e:
        raise InputError(f"cannot read {label}: {e.strerror or e}") from e
    finally:
        if f is not sys.stdin.buffer:
            f.close()


_RELATIVE = re.compile(r"(\d{1,9})([smhd])")


_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


class SinceType(_TimeParam):
    """``--since``: an RFC 3339 time (``Z`` or an offset), a date (``YYYY-MM-DD``, midnight
    UTC), or an age such as ``90m``, ``24h``, ``7d`` (before now)."""

    name = "TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> dt.datetime:
        if isinstance(value, dt.datetime):
            return value
        text = str(value).strip()
        relative = _RELATIVE.fullmatch(text)
        if relative:
            try:
                return dt.datetime.now(dt.UTC) - dt.timedelta(
                    **{_UNITS[relative[2]]: int(relative[1])}
                )
            except OverflowError:
                self.fail(f"{text!r} reaches back before the year 1")
        try:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            self.fail(f"{text!r} is not an RFC 3339 time, a date, or an age like 24h or 7d")
        if moment.tzinfo is None:
            if len(text) > 10:  # a time without a zone: refuse to guess one
                self.fail(f"{text!r} has no time zone (add Z or an offset)")
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.astimezone(dt.UTC)


SINCE = SinceType()


class DurationType(_IntParam):
    """A duration such as ``45s``, ``30m``, ``1h``, ``7d``, as whole seconds (above 0)."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        found = _RELATIVE.fullmatch(text)
        if not found or int(found[1]) == 0:
            self.fail(f"{text!r} is not a duration like 45s, 30m, 1h or 7d")
        seconds = dt.timedelta(**{_UNITS[found[2]]: int(found[1])}).total_seconds()
        return int(seconds)


DURATION = DurationType()


def since_option(f: Any) -> Any:
    return click.option(
        "--since",
        type=SINCE,
        default=None,
        help="Only records at or after TIME (RFC 3339, YYYY-MM-DD, or an age: 90m, 24h, 7d).",
    )(f)


def read_spawn_lines(source: str, registry: SeamRegistry, seam: str | None) -> list[Spawn]:
    """Every spawn of a JSON Lines file (blank lines skipped), each checked against its seam,
    all before any is used.

    Raises:
        InputError: naming the line (and field) of the first bad one.
    """
    from ..core.shadow.spawn import Spawn, check_spawn  # the shadow commands' only

    label = _label(source)
    spawns = []
    for number, line in enumerate(_read_text(source).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{label}:{number}"
        spawn = _named(
            where, lambda doc: Spawn.from_dict(doc, default_seam=seam), parse_json(line, where)
        )
        if seam is not None and spawn.seam != seam:
            raise MalformedError(f"{where}: seam", f"{spawn.seam!r} contradicts --seam {seam!r}")
        try:
            known = registry.get(spawn.seam)
        except UnknownSeamError as e:
            raise MalformedError(f"{where}: seam", str(e)) from e
        _named(where, functools.partial(check_spawn, seam=known), spawn)
        spawns.append(spawn)
    return spawns
