"""HydraFlow's audit-chain wire (``shadow-decisions.jsonl``): its canonical JSON, its two
hashes, its verify walk, the lines we export in it, and the envelope an imported record is
stored in. Pure: no I/O, no clock (SEMANTICS.md, "Reference wire formats").

One record a line, keys sorted, compact separators, newline-terminated::

    {"payload":{...},"payload_hash":"sha256:..","prev_hash":"sha256:..","record_hash":"sha256:..",
     "recorded_at":"..","schema_version":1,"seq":0}

* HydraFlow's canonical JSON is ``json.dumps(value, sort_keys=True, separators=(",", ":"),
  ensure_ascii=True, default=str)`` (not RFC 8785: non-ASCII is escaped as ``\\u`` + 4 hex
  digits, floats are Python's ``repr``, keys sort by code point).
* ``payload_hash`` = ``sha256:`` + hex SHA-256 of that text of the (stored, redacted) payload;
  ``record_hash`` = ``sha256:`` + hex SHA-256 of ``"<seq>|<prev_hash>|<payload_hash>"``; the
  first ``prev_hash`` is :data:`~.chain.GENESIS_HASH`; seqs run 0, 1, 2... ``recorded_at`` and
  ``schema_version`` are covered by no hash.
* verify walks in file order and breaks at the first line whose seq, prev_hash, payload_hash or
  record_hash does not hold; a line that does not parse (not JSON, not an object, a field
  missing or of the wrong type) breaks at the count of good lines before it. Blank lines are
  skipped.

A line exactly as HydraFlow writes it, its payload canonical and its ``recorded_at`` RFC 3339
UTC, is **plain** (:func:`plain_line`): once its bytes are known to be verified, its fields are
read back by position (:func:`plain_fields`) and its stored envelope written around its payload
text (:func:`plain_head`, :func:`plain_envelope`), with no JSON parse or encode.

An imported record is stored in our chain as the :func:`import_envelope` object (record type
:data:`IMPORT_RECORD_TYPE`): its ``origin`` (the source chain's genesis record hash, the file,
seq, both HydraFlow hashes and the original ``recorded_at``) and the HydraFlow payload. Readers
take the payload out with :func:`imported_payload`, which also maps a HydraFlow shadow record
(``decision``/``legacy``) to our shadow shape and takes our own payload out of a record our
export wrote (``{"rensei": {"record_hash", "seq"}, "value": ...}``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from ...errors import CanonicalEncodingError, HydraflowChainError
from ..canonical import SHA256_PREFIX, canonical_bytes
from ..redact import Redactor
from ..timestamps import is_timestamp
from .chain import GENESIS_HASH, encode_payload

__all__ = [
    "HF_SCHEMA_VERSION",
    "IMPORT_RECORD_TYPE",
    "HfRecord",
    "export_line",
    "export_payload",
    "export_text",
    "hf_canonical",
    "hf_payload_hash",
    "hf_record_hash",
    "import_envelope",
    "imported_payload",
    "plain_envelope",
    "plain_fields",
    "plain_head",
    "plain_line",
    "stored_envelope",
    "utc_recorded_at",
    "walk",
]

HF_SCHEMA_VERSION: Final = 1
IMPORT_RECORD_TYPE: Final = "hydraflow-import"
HfReason = Literal[
    "unparseable-line",
    "seq-gap",
    "prev-hash-mismatch",
    "payload-hash-mismatch",
    "record-hash-mismatch",
]
_FIELDS: Final = frozenset(("payload", "payload_hash", "prev_hash", "record_hash", "seq"))
_dumps = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
).encode


def hf_canonical(value: Any) -> str:
    """HydraFlow's canonical JSON text of ``value`` (non-JSON values as their ``str()``)."""
    return _dumps(value)


def hf_payload_hash(value: Any) -> str:
    """``sha256:`` + hex SHA-256 of the UTF-8 of :func:`hf_canonical` of a stored payload."""
    return SHA256_PREFIX + hashlib.sha256(_dumps(value).encode("utf-8")).hexdigest()


def hf_record_hash(seq: int, prev_hash: str, payload_hash: str) -> str:
    """``sha256:`` + hex SHA-256 of ``"<seq>|<prev_hash>|<payload_hash>"``."""
    text = f"{seq}|{prev_hash}|{payload_hash}"
    return SHA256_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class HfRecord:
    """One verified HydraFlow record (``recorded_at`` and ``schema_version`` as the line has
    them, ``None`` when absent)."""

    seq: int
    prev_hash: str
    payload_hash: str
    record_hash: str
    payload: Any
    recorded_at: Any
    schema_version: Any
    #: The payload's RFC 8785 text when it is also its HydraFlow text (no float, no constant,
    #: no ``\\u`` escape, no integer past 2**53 possible), else ``None``.
    canonical: str | None = None


def _broken(seq: int, reason: HfReason, detail: str) -> HydraflowChainError:
    return HydraflowChainError(seq, reason, f"seq {seq}: {reason}: {detail}")


def walk(lines: Iterable[str], *, start: int = 0, prev: str = GENESIS_HASH) -> Iterator[HfRecord]:
    """Verify HydraFlow lines in file order, yielding each record once it holds; ``lines``
    begin at seq ``start``, whose ``prev_hash`` is ``prev`` (by default, a whole chain).

    Raises:
        HydraflowChainError: at the first line that breaks the chain (its ``seq`` is the
            position in the chain, i.e. the count of good lines before it).
    """
    expected = start
    inexact = [False]

    def number(text: str) -> float:
        inexact[0] = True  # a float or a constant: Python's text is not RFC 8785's
        return float(text)

    def integer(text: str) -> int:
        if len(text) > 15:  # maybe past 2**53: RFC 8785 writes it another way, or refuses it
            inexact[0] = True
        return int(text)

    decode = json.JSONDecoder(parse_float=number, parse_int=integer, parse_constant=number).decode
    for line in lines:
        if not line or line.isspace():  # blank (what ``not line.strip()`` says, without a copy)
            continue
        inexact[0] = False
        try:
            doc = decode(line)
        except (ValueError, RecursionError) as e:
            raise _broken(expected, "unparseable-line", f"not JSON ({e})") from None
        if not isinstance(doc, dict) or not doc.keys() >= _FIELDS:
            raise _broken(expected, "unparseable-line", "not a HydraFlow audit record")
        seq, p_hash, prev_hash, r_hash = (
            doc["seq"],
            doc["payload_hash"],
            doc["prev_hash"],
            doc["record_hash"],
        )
        if not (
            type(seq) is int
            and type(p_hash) is str
            and type(prev_hash) is str
            and type(r_hash) is str
        ):
            raise _broken(expected, "unparseable-line", "a field has the wrong type")
        if seq != expected:
            raise _broken(expected, "seq-gap", f"found seq {seq}")
        if prev_hash != prev:
            raise _broken(expected, "prev-hash-mismatch", "does not link to the record before")
        payload = doc["payload"]
        text = _dumps(payload)
        if SHA256_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest() != p_hash:
            raise _broken(expected, "payload-hash-mismatch", "payload does not match its hash")
        if hf_record_hash(seq, prev_hash, p_hash) != r_hash:
            raise _broken(expected, "record-hash-mismatch", "fields do not match the hash")
        yield HfRecord(
            seq=seq,
            prev_hash=prev_hash,
            payload_hash=p_hash,
            record_hash=r_hash,
            payload=payload,
            recorded_at=doc.get("recorded_at"),
            schema_version=doc.get("schema_version"),
            canonical=None if inexact[0] or "\\u" in text else text,
        )
        prev = r_hash
        expected += 1


def utc_recorded_at(value: Any) -> str | None:
    """A HydraFlow ``recorded_at`` as our RFC 3339 UTC text (the same instant: an offset is
    converted, ``+00:00`` becomes ``Z``, a fraction is kept to the microsecond), or ``None``
    when it names no instant (absent, not ISO 8601, or without a time zone)."""
    if not isinstance(value, str):
        return None
    if is_timestamp(value):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None or moment.utcoffset() is None:
        return None
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S" + (".%fZ" if moment.microsecond else "Z"))


def import_envelope(record: HfRecord, *, chain: str, file: str) -> dict[str, Any]:
    """The payload our chain stores for an imported HydraFlow record (our redactor runs over
    it when it is appended)."""
    return {
        "record_type": IMPORT_RECORD_TYPE,
        "schema_version": 1,
        "origin": {
            "chain": chain,
            "file": file,
            "seq": record.seq,
            "record_hash": record.record_hash,
            "payload_hash": record.payload_hash,
            "recorded_at": record.recorded_at,
            "schema_version": record.schema_version,
        },
        "payload": record.payload,
    }


def stored_envelope(record: HfRecord, *, chain: str, file: str, redactor: Redactor) -> bytes:
    """The stored form (``encode_payload``) of :func:`import_envelope`, byte for byte, written
    around the payload's canonical text when the walk found it (no re-encoding of the payload).

    Raises:
        CanonicalEncodingError: the payload has no RFC 8785 form (a non-finite number).
    """
    envelope = import_envelope(record, chain=chain, file=file)
    if record.canonical is None:
        return encode_payload(envelope, redactor)
    data = (
        b'{"origin":'
        + canonical_bytes(envelope["origin"])
        + b',"payload":'
        + record.canonical.encode("utf-8")
        + f',"record_type":"{IMPORT_RECORD_TYPE}","schema_version":1}}'.encode()
    )
    if redactor.might_match(data.decode("utf-8")):
        return encode_payload(envelope, redactor)
    return data


#: A plain line up to its payload, and from its payload on (see :func:`plain_line`).
_BEFORE_PAYLOAD: Final = '{"payload":'
_AFTER_PAYLOAD: Final = ',"payload_hash":"'
_HASH_LEN: Final = len(SHA256_PREFIX) + 64
_PREV_AT: Final = len(_AFTER_PAYLOAD) + _HASH_LEN + len('","prev_hash":"')
_RECORD_AT: Final = _PREV_AT + _HASH_LEN + len('","record_hash":"')
_STAMP_AT: Final = _RECORD_AT + _HASH_LEN + len('","recorded_at":"')
#: :func:`is_timestamp`, remembered: a chain's records share few times (a batch, one).
_is_stamp: Final = functools.lru_cache(maxsize=256)(is_timestamp)


def plain_line(line: str, record: HfRecord) -> bool:
    """Whether ``line``, which :func:`walk` read as ``record``, is HydraFlow's own text of it
    with nothing to re-encode: the payload written as its canonical text
    (``record.canonical``), ``recorded_at`` an RFC 3339 UTC timestamp, ``schema_version`` 1,
    the keys sorted, no whitespace, the newline optional. :func:`plain_fields` reads such a
    line back by position, without parsing it."""
    text, stamp = record.canonical, record.recorded_at
    if text is None or type(stamp) is not str or not stamp.isascii() or not _is_stamp(stamp):
        return False
    tail = (
        f'{_AFTER_PAYLOAD}{record.payload_hash}","prev_hash":"{record.prev_hash}",'
        f'"record_hash":"{record.record_hash}","recorded_at":"{stamp}",'
        f'"schema_version":{HF_SCHEMA_VERSION},"seq":{record.seq}}}'
    )
    end = len(line) - 1 if line.endswith("\n") else len(line)
    return (
        end == len(_BEFORE_PAYLOAD) + len(text) + len(tail)
        and line.startswith(_BEFORE_PAYLOAD)
        and line.startswith(text, len(_BEFORE_PAYLOAD))
        and line.endswith(tail, 0, end)
    )


def plain_fields(line: str) -> tuple[str, str, str, str, str]:
    """``(payload text, payload_hash, prev_hash, record_hash, recorded_at)`` of a line
    :func:`plain_line` accepted, read by position (meaningless for any other line). The
    last ``,"payload_hash":"`` of such a line is the record's own (the payload's come before)."""
    at = line.rfind(_AFTER_PAYLOAD)
    stamp = at + _STAMP_AT
    return (
        line[len(_BEFORE_PAYLOAD) : at],
        line[at + len(_AFTER_PAYLOAD) : at + len(_AFTER_PAYLOAD) + _HASH_LEN],
        line[at + _PREV_AT : at + _PREV_AT + _HASH_LEN],
        line[at + _RECORD_AT : at + _RECORD_AT + _HASH_LEN],
        line[stamp : line.find('"', stamp)],
    )


def plain_head(*, chain: str, file: str) -> str | None:
    """What every :func:`plain_envelope` of one import begins with (its origin's ``chain``
    and ``file``), or ``None`` when they have no RFC 8785 text (the plain path refuses)."""
    try:
        return canonical_bytes({"chain": chain, "file": file}).decode("utf-8")[:-1]
    except CanonicalEncodingError:
        return None


def plain_envelope(
    head: str, *, seq: int, text: str, payload_hash: str, record_hash: str, recorded_at: str
) -> str:
    """:func:`stored_envelope`'s text, before redaction, of the record of a plain line
    (:func:`plain_line`, :func:`plain_fields`), after the :func:`plain_head` of its import:
    the origin's members follow ``chain`` and ``file`` in RFC 8785's key order, and none of
    them needs escaping (hashes, a timestamp, integers)."""
    return (
        f'{{"origin":{head},"payload_hash":"{payload_hash}","record_hash":"{record_hash}",'
        f'"recorded_at":"{recorded_at}","schema_version":{HF_SCHEMA_VERSION},"seq":{seq}}},'
        f'"payload":{text},"record_type":"{IMPORT_RECORD_TYPE}","schema_version":1}}'
    )


def imported_payload(payload: Any) -> Any:
    """What a reader counts for a stored payload: an imported record's HydraFlow payload
    (mapped, see the module docstring), any other payload as it is."""
    if not (isinstance(payload, dict) and payload.get("record_type") == IMPORT_RECORD_TYPE):
        return payload
    inner = payload.get("payload")
    if not isinstance(inner, dict):
        return inner
    if set(inner) == {"rensei", "value"}:  # one of our records, exported by us
        return inner["value"]
    if "record_type" in inner or not {"decision", "agreed", "divergence"} <= set(inner):
        return inner
    # HydraFlow's ShadowDecision (document 001 §D6): the decision, the route that ran (its
    # LegacyRoute), agreed, the divergence; our shadow record names them proposed and actual.
    origin = payload.get("origin")
    stamp = origin.get("recorded_at") if isinstance(origin, dict) else None
    mapped = {
        "record_type": "shadow-decision",
        "schema_version": 1,
        "recorded_at": inner.get("recorded_at", stamp),
        "seam": inner.get("seam", "unknown"),
        "principal_id": inner.get("principal_id"),
        "actual": inner.get("actual", inner.get("legacy", inner.get("legacy_route"))),
        "proposed": inner["decision"],
        "agreed": inner["agreed"],
        "divergence": inner["divergence"],
    }
    return mapped


def export_payload(payload: Any, *, seq: int, record_hash: str) -> dict[str, Any]:
    """The HydraFlow payload of one of our records: ``{"rensei": {"record_hash", "seq"},
    "value": payload}`` (our seq and record hash beside our payload, untouched)."""
    return {"rensei": {"record_hash": record_hash, "seq": seq}, "value": payload}


class _Floats:
    """A decoder of stored payload text that notes whether every number reads back as written
    (Python's ``repr`` of each float equals RFC 8785's text of it)."""

    def __init__(self) -> None:
        self.exact = True
        self.decode = json.JSONDecoder(parse_float=self._float).decode

    def _float(self, text: str) -> float:
        value = float(text)
        if repr(value) != text:
            self.exact = False
        return value


_FLOATS: Final = _Floats()


def export_text(stored: bytes, *, seq: int, record_hash: str) -> str:
    """HydraFlow's canonical text of :func:`export_payload` for a record's stored (RFC 8785)
    payload bytes. When those are ASCII without DEL (``json.dumps`` escapes it, RFC 8785 does
    not) and every float reads back as written, HydraFlow's canonical text of the payload *is*
    the stored text (keys sorted alike, the same escapes), so it is spliced in; otherwise the
    payload is encoded again.

    Raises:
        ValueError: the stored bytes are not JSON (a damaged record).
    """
    text = stored.decode("utf-8")
    _FLOATS.exact = True
    value = _FLOATS.decode(text)
    if _FLOATS.exact and stored.isascii() and b"\x7f" not in stored:  # json escapes DEL
        return f'{{"rensei":{{"record_hash":"{record_hash}","seq":{seq}}},"value":{text}}}'
    return _dumps(export_payload(value, seq=seq, record_hash=record_hash))


def export_line(seq: int, prev_hash: str, text: str, recorded_at: str) -> tuple[str, str]:
    """``(line with its newline, record hash)`` of one HydraFlow record whose payload has the
    canonical ``text`` (:func:`hf_canonical`, :func:`export_text`): exactly the text of
    ``json.dumps(record, sort_keys=True, separators=(",", ":"))`` (ASCII, every nested key
    sorted), so HydraFlow's verify and a reader re-encoding it agree byte for byte."""
    p_hash = SHA256_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()
    r_hash = hf_record_hash(seq, prev_hash, p_hash)
    line = (
        f'{{"payload":{text},"payload_hash":"{p_hash}","prev_hash":"{prev_hash}",'
        f'"record_hash":"{r_hash}","recorded_at":{_dumps(recorded_at)},'
        f'"schema_version":{HF_SCHEMA_VERSION},"seq":{seq}}}\n'
    )
    return line, r_hash
