"""Audit-chain link rules, the stored-record rules and the streaming verifier. Pure: no I/O, no
clock, no key material (the adapter signs notes and supplies a signature check).

The chain (SEMANTICS.md "Audit chain", document 001 §D6):

* ``seq`` counts from 0; the first record's ``prev_hash`` is :data:`GENESIS_HASH`
  (``sha256:`` + 64 zeros); every later one carries the previous ``record_hash``.
* The payload is redacted, then written as RFC 8785 canonical bytes; those bytes are what is
  stored, and ``payload_hash = digest(redacted payload)`` = ``sha256:`` + SHA-256 of those bytes.
* ``record_hash = digest({seq, prev_hash, recorded_at, payload_hash})``. **``recorded_at`` is
  covered** (the reference leaves it outside the hash, so a record could be re-dated without
  breaking the chain; here re-dating is a ``record-hash-mismatch``).

* A stored record is readable when ``recorded_at`` is RFC 3339 UTC (``...Z``) and the payload
  bytes are strict JSON: UTF-8, no duplicate object key, no ``NaN``/``Infinity`` (the rules the
  CLI applies to its input, and that the canonical encoder never breaks). Anything else is
  ``unparseable-record``, whether or not its hashes were recomputed to match. Below a verified
  checkpoint carrying :data:`STRICT_PAYLOADS` its signer has established this already, and
  :func:`verify_chain` may take its word (see there).

Checkpoints (C2SP signed notes) are parsed and written by :mod:`.note`; the names are re-exported
here. ``recorded_at`` is checked and written by the shared :mod:`rensei_routing.core.timestamps`;
``check_timestamp`` and ``format_timestamp`` are re-exported here for the modules that still
import them from here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring as _e
from typing import Any, Final

from ...errors import MalformedError
from .. import _parse as p
from ..canonical import SHA256_PREFIX, canonical_bytes, digest, sha256_hex
from ..redact import DEFAULT_REDACTOR, Redactor
from ..timestamps import check_timestamp, format_timestamp, is_timestamp
from .note import (
    NOTE_MAX_BYTES,
    STRICT_PAYLOADS,
    Checkpoint,
    NoteSignature,
    checkpoint_origin,
    note_key_hash,
    parse_checkpoint,
)
from .treehead import chain_head
from .verdict import GENESIS_HASH, REASONS, Reason, VerifyResult
from .verdict import broken as _broken

__all__ = [
    "GENESIS_HASH",
    "NOTE_MAX_BYTES",
    "PROGRESS_EVERY",
    "REASONS",
    "ROW_COLUMNS",
    "STRICT_PAYLOADS",
    "AuditRecord",
    "Checkpoint",
    "NoteSignature",
    "Reason",
    "VerifyResult",
    "check_timestamp",
    "checkpoint_marks",
    "checkpoint_origin",
    "encode_payload",
    "encode_payloads",
    "end_of_log",
    "format_timestamp",
    "link_rows",
    "link_stamped",
    "note_key_hash",
    "parse_checkpoint",
    "payload_hash",
    "record_hash",
    "verify_chain",
    "walk_range",
]


#: The column order of a stored row, as :func:`verify_chain` expects it.
ROW_COLUMNS: Final = ("seq", "recorded_at", "prev_hash", "payload_hash", "record_hash", "payload")
Row = tuple[int, str, str, str, str, bytes]

_HASH = re.compile(r"sha256:[0-9a-f]{64}")
PROGRESS_EVERY: Final = 10_000


# -- records ------------------------------------------------------------------------------------
_MAX_SAFE_INT: Final = 2**53 - 1


def encode_payload(payload: Any, redactor: Redactor = DEFAULT_REDACTOR) -> bytes:
    """The stored form of a payload: the RFC 8785 bytes of its redacted value.

    ``payload`` is a JSON value, or an object whose ``canonical()`` returns the RFC 8785 bytes of
    its ``to_dict()`` (a :class:`~rensei_routing.core.routing.decision.RouteDecision` writes them
    without
    building the dict). The redaction pre-check runs on the canonical text, so a payload with
    nothing credential-shaped is encoded once and never walked by a regex; one that might hold
    a credential is redacted as a JSON value and encoded again.

    Raises:
        CanonicalEncodingError: the payload is not a JSON value with a canonical form.
    """
    own = getattr(type(payload), "canonical", None)
    if own is not None and hasattr(payload, "to_dict"):
        data = own(payload)
        if redactor.might_match(data.decode("utf-8")):
            data = canonical_bytes(redactor.redact(payload.to_dict()))
        return bytes(data)
    data = canonical_bytes(payload)
    if redactor.might_match(data.decode("utf-8")):
        data = canonical_bytes(redactor.redact(payload))
    return data


def encode_payloads(payloads: Iterable[Any], redactor: Redactor = DEFAULT_REDACTOR) -> list[bytes]:
    """:func:`encode_payload` of each payload, in order, with the redaction pre-check of one
    batch remembered per distinct string: a payload object whose type has
    ``stored_may_redact(scan)`` (a decision, a shadow record) answers it from the strings it
    holds through one shared :class:`~rensei_routing.core.routing.ids.ScanMemo` (names, ids
    and models repeat across a batch), and when that says nothing can match, its canonical
    bytes are stored as they are, exactly what :func:`encode_payload` returns then. Any other
    payload takes :func:`encode_payload` itself.

    Raises:
        CanonicalEncodingError: a payload is not a JSON value with a canonical form.
    """
    from ..routing.ids import ScanMemo  # the routing domain, only when a batch is encoded

    scan = ScanMemo(redactor)
    out: list[bytes] = []
    for payload in payloads:
        hook = getattr(type(payload), "stored_may_redact", None)
        if hook is not None and not hook(payload, scan):
            out.append(bytes(payload.canonical()))
        else:
            out.append(encode_payload(payload, redactor))
    return out


def payload_hash(data: bytes) -> str:
    """``sha256:`` + SHA-256 of stored payload bytes (equal to ``digest`` of the redacted value)."""
    return SHA256_PREFIX + sha256_hex(data)


def record_hash(seq: int, prev_hash: str, recorded_at: str, payload_hash: str) -> str:
    """The link digest: ``digest({"seq", "prev_hash", "recorded_at", "payload_hash"})``.

    The RFC 8785 text of that fixed-shape object is written directly (the verifier computes it
    once per record); the tests check it equals the general encoder's.
    """
    if type(seq) is not int or not 0 <= seq <= _MAX_SAFE_INT:
        return digest(
            {
                "seq": seq,
                "prev_hash": prev_hash,
                "recorded_at": recorded_at,
                "payload_hash": payload_hash,
            }
        )
    text = (
        f'{{"payload_hash":{_e(payload_hash)},"prev_hash":{_e(prev_hash)},'
        f'"recorded_at":{_e(recorded_at)},"seq":{seq}}}'
    )
    return SHA256_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def link_rows(
    payloads: Iterable[bytes], *, seq: int, prev_hash: str, recorded_at: str
) -> list[Row]:
    """Chain encoded payloads after the head (``seq`` is the next seq, ``prev_hash`` the head hash),
    all recorded at ``recorded_at``: :func:`link_stamped` with one time.

    Returns rows in :data:`ROW_COLUMNS` order, ready to insert.

    Raises:
        MalformedError: ``recorded_at`` is not RFC 3339 UTC.
    """
    return link_stamped(((recorded_at, data) for data in payloads), seq=seq, prev_hash=prev_hash)


def link_stamped(items: Iterable[tuple[str, bytes]], *, seq: int, prev_hash: str) -> list[Row]:
    """Chain ``(recorded_at, encoded payload)`` pairs after the head, each with its own time (an
    imported record keeps the one it was recorded at); ``seq`` and ``prev_hash`` as
    :func:`link_rows` takes them.

    Raises:
        MalformedError: a ``recorded_at`` is not RFC 3339 UTC.
    """
    rows: list[Row] = []
    last = None
    for recorded_at, data in items:
        if recorded_at != last:  # a batch shares one time: checked once
            last = check_timestamp(recorded_at)
        p_hash = SHA256_PREFIX + hashlib.sha256(data).hexdigest()
        r_hash = record_hash(seq, prev_hash, recorded_at, p_hash)
        rows.append((seq, recorded_at, prev_hash, p_hash, r_hash, data))
        prev_hash = r_hash
        seq += 1
    return rows


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One stored audit record; ``payload_bytes`` are the redacted canonical bytes."""

    seq: int
    recorded_at: str
    prev_hash: str
    payload_hash: str
    record_hash: str
    payload_bytes: bytes

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> AuditRecord:
        """Build from a row in :data:`ROW_COLUMNS` order (no checks: see :func:`verify_chain`)."""
        seq, recorded_at, prev_hash, p_hash, r_hash, data = row
        return cls(
            seq=seq,
            recorded_at=recorded_at,
            prev_hash=prev_hash,
            payload_hash=p_hash,
            record_hash=r_hash,
            payload_bytes=bytes(data),
        )

    @property
    def payload(self) -> Any:
        """The redacted payload as a JSON value.

        Raises:
            MalformedError: the stored bytes are not JSON (the record is damaged).
        """
        try:
            return _parse_payload(self.payload_bytes)
        except (ValueError, RecursionError) as e:
            raise MalformedError(f"audit[{self.seq}].payload", f"not JSON: {e}") from e

    @property
    def payload_error(self) -> str | None:
        """Why the stored payload bytes do not parse as JSON (one line), or ``None`` if they do.

        The same test :func:`verify_chain` applies to tell ``unparseable-record`` from
        ``payload-hash-mismatch``, so a damaged record reads the same here and there.
        """
        try:
            _parse_payload(self.payload_bytes)
        except (ValueError, RecursionError) as e:
            return _one_line(f"not JSON: {e}")
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the five chain fields and the decoded payload. Total: never raises.

        A damaged record (payload bytes that are not JSON) is shown as stored instead:
        ``"payload": null``, ``"payload_raw_hex"`` (the stored bytes in lowercase hex) and
        ``"payload_error"`` (why they do not parse). An intact record has neither extra key.
        """
        out: dict[str, Any] = {
            "seq": self.seq,
            "recorded_at": self.recorded_at,
            "prev_hash": self.prev_hash,
            "payload_hash": self.payload_hash,
            "record_hash": self.record_hash,
        }
        try:
            out["payload"] = _parse_payload(self.payload_bytes)
        except (ValueError, RecursionError) as e:
            out["payload"] = None
            out["payload_raw_hex"] = self.payload_bytes.hex()
            out["payload_error"] = _one_line(f"not JSON: {e}")
        return out


def _parse_payload(data: bytes) -> Any:
    """Stored payload bytes as a JSON value: strictly UTF-8 (``json.loads`` would also guess
    UTF-16/32 from the bytes), no duplicate key, no ``NaN``/``Infinity``, nothing after it.

    Raises:
        ValueError: not UTF-8 (``UnicodeDecodeError``) or not such JSON.
        RecursionError: nested too deeply to parse.
    """
    return p.STRICT_DECODER.decode(data.decode("utf-8"))


def _one_line(text: str) -> str:
    """``text`` with every control character (newline, tab, ...) replaced by a space."""
    return "".join(" " if c < " " or c == "\x7f" else c for c in text)


# -- verification -------------------------------------------------------------------------------


def verify_chain(
    rows: Iterable[Sequence[Any]],
    *,
    checkpoints: Sequence[Checkpoint] = (),
    origin: str | None = None,
    signature_ok: Callable[[Checkpoint], bool] | None = None,
    progress: Callable[[int], None] | None = None,
    start_seq: int = 0,
    start_hash: str = GENESIS_HASH,
    rows_again: Callable[[], Iterable[Sequence[Any]]] | None = None,
) -> VerifyResult:
    """Walk stored rows (``ROW_COLUMNS`` order, ascending seq) once, in constant memory.

    Per record, in order: the row is readable (types, hash syntax, ``recorded_at`` is RFC 3339
    UTC, the payload is strict JSON: see the module docstring) else ``unparseable-record``;
    ``seq`` is the next expected one else ``seq-gap``; ``prev_hash`` is the previous record hash
    else ``prev-hash-mismatch``; the payload bytes hash to ``payload_hash`` else
    ``payload-hash-mismatch``; the recomputed record hash matches else ``record-hash-mismatch``.
    The first failure ends the walk.

    Checkpoints are checked first: each must name ``origin`` (when given) and pass
    ``signature_ok``, else ``checkpoint-signature-invalid`` (``first_broken_seq`` is ``None``).
    While walking, the record at each checkpoint's size must carry its head hash, and the log
    must reach every checkpoint's size, else ``truncated-below-checkpoint`` at the seq concerned.
    ``progress(records_checked)`` is called every 10,000 records and at the end.

    ``rows_again()`` returns the same rows once more, from the start (the same snapshot). Given
    it, the payloads and ``recorded_at`` of the records below the largest checkpoint carrying
    :data:`STRICT_PAYLOADS` are not parsed: every other check still runs, and the record at
    that size must carry the checkpoint's head hash, so (through SHA-256) they are the bytes its
    signer parsed. A walk that then fails below that size is repeated over ``rows_again()``
    parsing every record, so the verdict is exactly a full strict walk's. Without ``rows_again``
    (a stream read once) every record is parsed.

    ``start_seq``/``start_hash`` resume after a trusted prefix (e.g. a verified checkpoint): the
    rows must then begin at ``start_seq`` and link to ``start_hash``; counts include the prefix,
    and checkpoints inside the prefix are not compared.

    Raises:
        ValueError: checkpoints were given without ``signature_ok``.
    """
    marks = checkpoint_marks(checkpoints, origin=origin, signature_ok=signature_ok)
    if isinstance(marks, VerifyResult):
        return marks
    # Every checkpoint has passed its signature check by now, so the largest one whose signer
    # says it parsed what it signed may spare the parse below its size.
    parsed_below = 0
    if rows_again is not None:
        parsed_below = max(
            (c.size for c in checkpoints if STRICT_PAYLOADS in c.extensions), default=0
        )
    count = len(checkpoints)
    result = _walk(rows, marks, count, progress, start_seq, start_hash, parsed_below)
    seq = result.first_broken_seq
    if rows_again is not None and seq is not None and seq < parsed_below:
        # Unparsed records may hide the first broken one: e.g. a record rewritten as non-JSON,
        # hashes recomputed after it, shows here only as a mismatch with the checkpoint. The
        # strict walk names it. (A failure at or above the size needs no second walk: the
        # record below it matched the checkpoint, so every unparsed record is the signer's.)
        # It stops at or before ``seq``, so it has no progress to report beyond the first's.
        result = _walk(rows_again(), marks, count, None, start_seq, start_hash, 0)
    return result


def checkpoint_marks(
    checkpoints: Sequence[Checkpoint],
    *,
    origin: str | None,
    signature_ok: Callable[[Checkpoint], bool] | None,
) -> dict[int, list[str]] | VerifyResult:
    """The checks :func:`verify_chain` runs on ``checkpoints`` before any record: the head
    hashes the walk must meet, by size, or the failure that ends the verification.

    Raises:
        ValueError: checkpoints were given without ``signature_ok``.
    """
    if checkpoints and signature_ok is None:
        raise ValueError("checkpoints need a signature check")
    marks: dict[int, list[str]] = {}
    for cp in checkpoints:
        if origin is not None and cp.origin != origin:
            return _broken(
                0,
                None,
                "checkpoint-signature-invalid",
                f"checkpoint origin {cp.origin!r} is not this log ({origin!r})",
            )
        assert signature_ok is not None
        if not signature_ok(cp):
            return _broken(
                0,
                None,
                "checkpoint-signature-invalid",
                f"checkpoint of size {cp.size} is not signed by this host's key",
            )
        marks.setdefault(cp.size, []).append(chain_head(cp))
    for want in marks.get(0, ()):
        if want != GENESIS_HASH:
            return _broken(
                0,
                0,
                "truncated-below-checkpoint",
                "checkpoint of size 0 does not carry the genesis hash",
            )
    return marks


def walk_range(
    rows: Iterable[Sequence[Any]],
    marks: dict[int, list[str]],
    *,
    expected: int,
    prev: str,
    parsed_below: int,
    progress: Callable[[int], None] | None = None,
) -> VerifyResult:
    """One stretch of :func:`verify_chain`'s walk: ``rows`` checked from the state
    ``(expected, prev)`` exactly as a whole walk checks them there (the same code), but with no
    end-of-log check and no final progress call; a success carries the state after the last
    row (``records_checked`` = the next expected seq, ``head_hash``). See :mod:`.ranges`."""
    return _walk(rows, marks, 0, progress, expected, prev, parsed_below, final=False)


def _walk(
    rows: Iterable[Sequence[Any]],
    marks: dict[int, list[str]],
    count: int,
    progress: Callable[[int], None] | None,
    expected: int,
    prev: str,
    parsed_below: int,
    *,
    final: bool = True,
) -> VerifyResult:
    """One walk of :func:`verify_chain`. Records below ``parsed_below`` skip the payload parse
    and the ``recorded_at`` form: their record hash covers ``recorded_at``, so once the record
    at that size matches the checkpoint, both are what its signer checked."""
    strict = p.is_strict_json
    sha256 = hashlib.sha256
    escape = _e
    stamp: str | None = None  # the last recorded_at found valid: a batch shares one
    # The last recorded_at escaped for a record hash, and its escaped form: a batch's records
    # share one, so it is escaped once per batch (equal strings escape alike).
    esc_of: str | None = None
    esc = ""
    # The fast path below needs ``prev`` well formed: equal to it, ``prev_hash`` is too.
    linked = _HASH.fullmatch(prev) is not None
    for row in rows:
        try:
            seq, recorded_at, prev_hash, p_hash, r_hash, data = row
        except (TypeError, ValueError):
            return _broken(
                expected, expected, "unparseable-record", "row has the wrong shape", prev
            )
        # Fast path: every equality holds. A hash equal to a well-formed one (``prev``, or a
        # digest computed here) has the form the slow path checks, and ``recorded_at`` is
        # escaped as record_hash escapes it, so passing here is passing every check of
        # _check_row; anything else takes that slow path, which names the first failure in
        # order. (A lone surrogate, which record_hash cannot encode, is no timestamp; below
        # ``parsed_below`` its hash cannot lead to the checkpoint's head either.)
        if (
            type(seq) is int
            and type(recorded_at) is str
            and type(prev_hash) is str
            and type(p_hash) is str
            and type(r_hash) is str
            and type(data) is bytes
            and seq == expected <= _MAX_SAFE_INT
            and prev_hash == prev
            and linked
            and SHA256_PREFIX + sha256(data).hexdigest() == p_hash
            and SHA256_PREFIX
            + sha256(
                f'{{"payload_hash":"{p_hash}","prev_hash":"{prev_hash}","recorded_at":'
                f"{esc if recorded_at == esc_of else (esc := escape(esc_of := recorded_at))}"
                f',"seq":{seq}}}'.encode("utf-8", "surrogatepass")
            ).hexdigest()
            == r_hash
            and (
                seq < parsed_below
                or ((recorded_at == stamp or is_timestamp(recorded_at)) and strict(data))
            )
        ):
            if seq >= parsed_below:
                stamp = recorded_at
        else:
            broken = _check_row(row, expected, prev)
            if broken is not None:
                return broken
            linked = True
        prev = r_hash
        expected += 1
        if marks and expected in marks:
            for want in marks[expected]:
                if want != r_hash:
                    return _broken(
                        seq,
                        seq,
                        "truncated-below-checkpoint",
                        f"record {seq} differs from the checkpoint of size {expected}",
                        prev,
                    )
        if progress is not None and expected % PROGRESS_EVERY == 0:
            progress(expected)
    if not final:
        return VerifyResult(ok=True, records_checked=expected, head_hash=prev)
    if progress is not None:
        progress(expected)
    return end_of_log(marks, count, expected, prev)


def end_of_log(marks: dict[int, list[str]], count: int, expected: int, prev: str) -> VerifyResult:
    """The verdict of a walk that read every row without a failure: ``expected`` records,
    head ``prev``; ``truncated-below-checkpoint`` if a checkpoint vouches for more."""
    beyond = [size for size in marks if size > expected]
    if beyond:
        return _broken(
            expected,
            expected,
            "truncated-below-checkpoint",
            f"log has {expected} records, a checkpoint vouches for {max(beyond)}",
            prev,
        )
    return VerifyResult(
        ok=True, records_checked=expected, head_hash=prev, checkpoints_checked=count
    )


def _check_row(row: Sequence[Any], expected: int, prev: str) -> VerifyResult | None:
    """Every check on one record, in the documented order: the first failure, or ``None``."""
    seq, recorded_at, prev_hash, p_hash, r_hash, data = row
    if not (
        type(seq) is int
        and type(recorded_at) is str
        and type(prev_hash) is str
        and type(p_hash) is str
        and type(r_hash) is str
        and type(data) is bytes
        and _HASH.fullmatch(prev_hash)
        and _HASH.fullmatch(p_hash)
        and _HASH.fullmatch(r_hash)
    ):
        return _broken(
            expected,
            expected,
            "unparseable-record",
            f"record {expected} has a field of the wrong type or form",
            prev,
        )
    if not is_timestamp(recorded_at):
        return _broken(
            expected,
            expected,
            "unparseable-record",
            f"record {expected} recorded_at is not an RFC 3339 UTC timestamp",
            prev,
        )
    try:
        p.STRICT_DECODER.decode(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        return _broken(
            expected,
            expected,
            "unparseable-record",
            _one_line(f"record {expected} payload is not JSON: {e}"),
            prev,
        )
    if seq != expected:
        return _broken(expected, expected, "seq-gap", f"expected seq {expected}, found {seq}", prev)
    if prev_hash != prev:
        return _broken(
            expected,
            expected,
            "prev-hash-mismatch",
            f"record {seq} does not link to record {seq - 1}",
            prev,
        )
    if SHA256_PREFIX + hashlib.sha256(data).hexdigest() != p_hash:
        return _broken(
            expected,
            expected,
            "payload-hash-mismatch",
            f"record {seq} payload does not match its payload hash",
            prev,
        )
    if record_hash(seq, prev_hash, recorded_at, p_hash) != r_hash:
        return _broken(
            expected,
            expected,
            "record-hash-mismatch",
            f"record {seq} fields do not match its record hash",
            prev,
        )
    return None
