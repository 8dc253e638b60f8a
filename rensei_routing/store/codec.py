"""The stored form of audit payloads: a zstd frame compressed with a dictionary kept in the
database, or (records written before schema 3) the canonical bytes themselves. Owns the
``audit_dictionaries`` table and the ``rensei_payload(payload)`` SQL function; must not touch
the chain: every hash covers the canonical, uncompressed bytes, which is what every reader
sees (``SELECT rensei_payload(payload)``), so ``verify``, ``show`` and ``tail`` read a
compressed record exactly as an uncompressed one.

The two forms cannot be confused: canonical JSON starts with ``{``, ``[``, ``"``, a digit,
``-``, ``t``, ``f`` or ``n``, a zstd frame with its magic number ``28 b5 2f fd``. Each frame
names its dictionary (its id, written in the frame header); the dictionaries live in the
database, so a record stays readable whatever dictionary a later release ships. A frame that
does not decompress (damaged, an unknown dictionary, a declared size over
:data:`MAX_PAYLOAD_BYTES`) reads as its stored bytes, which are not JSON: the verifier then
reports the record as ``unparseable-record``, as it would any other damage.

The shipped dictionary (``data/audit-1.zdict``, 48 KiB) was trained by
``python -m benchmarks.train_dictionary`` on decision payloads; schema migration 3 stores it.

Every connection registers the SQL function, but most never read or write a payload (a
command that reads policies): :mod:`zstandard` is imported, and the dictionaries are turned
into a compressor and decompressors, when a first payload is compressed or a first frame read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

import apsw

if TYPE_CHECKING:  # imported where a payload is first compressed or a frame first read
    import zstandard

__all__ = [
    "FUNCTION",
    "MAX_PAYLOAD_BYTES",
    "ZSTD_MAGIC",
    "Codec",
    "migrate_dictionaries",
    "shipped_dictionary",
]

ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
#: The SQL function every reader selects payloads through.
FUNCTION: Final = "rensei_payload"
#: The largest payload a frame may declare (a damaged or hostile frame must not allocate more).
MAX_PAYLOAD_BYTES: Final = 64 * 1024 * 1024
#: zstd level of new records: level 3 (zstd's default) is within a few percent of level 9 in
#: size with a dictionary, at a fraction of the time.
LEVEL: Final = 3
_SHIPPED: Final = "audit-1.zdict"
_DICT_ID: Final = attrgetter("dict_id")
_CONTENT_SIZE: Final = attrgetter("content_size")


def shipped_dictionary() -> bytes:
    """The dictionary this release stores in a new (or migrated) database."""
    from importlib import resources

    return (resources.files(__package__) / "data" / _SHIPPED).read_bytes()


def migrate_dictionaries(conn: apsw.Connection) -> None:
    """Schema step 3: the dictionaries table, holding the shipped dictionary under its id."""
    conn.execute(
        "CREATE TABLE audit_dictionaries(id INTEGER PRIMARY KEY, body BLOB NOT NULL) STRICT"
    )
    import zstandard

    body = shipped_dictionary()
    dict_id = zstandard.ZstdCompressionDict(body).dict_id()
    conn.execute("INSERT INTO audit_dictionaries(id, body) VALUES (?, ?)", (dict_id, body))


class Codec:
    """Compresses new payloads with the newest dictionary; reads any stored payload back."""

    __slots__ = ("_compressor", "_decompressors", "_dictionaries", "_error", "_frame")

    #: zstandard's frame header reader and error type, set by :meth:`_make`.
    _frame: Callable[[bytes], zstandard.FrameParameters]
    _error: type[Exception]

    def __init__(self, dictionaries: Mapping[int, bytes]) -> None:
        self._dictionaries = dict(dictionaries)
        #: Made with the first payload compressed or frame read (:meth:`_make`).
        self._decompressors: dict[int, zstandard.ZstdDecompressor] | None = None
        self._compressor: zstandard.ZstdCompressor | None = None

    def _make(self) -> dict[int, zstandard.ZstdDecompressor]:
        """Import zstandard and make the decompressors by dictionary id and the compressor."""
        import zstandard

        dictionaries = self._dictionaries
        if dictionaries:
            self._compressor = zstandard.ZstdCompressor(
                level=LEVEL,
                dict_data=zstandard.ZstdCompressionDict(dictionaries[max(dictionaries)]),
            )
        self._frame = zstandard.get_frame_parameters
        self._error = zstandard.ZstdError
        self._decompressors = {
            i: zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(body))
            for i, body in dictionaries.items()
        }
        return self._decompressors

    @classmethod
    def load(cls, conn: apsw.Connection) -> Codec:
        """The dictionaries stored in this (schema 3 or later) database.

        Raises:
            apsw.Error: the table cannot be read.
        """
        out: dict[int, bytes] = {}
        for dict_id, body in conn.execute("SELECT id, body FROM audit_dictionaries"):
            assert isinstance(dict_id, int) and isinstance(body, bytes)  # STRICT table
            out[dict_id] = body
        return cls(out)

    def reads_as(self, other: Codec) -> bool:
        """Whether the two hold the same dictionaries under the same ids, so any stored bytes
        read the same through either."""
        return self._dictionaries == other._dictionaries

    def register(self, conn: apsw.Connection) -> None:
        """Make ``rensei_payload(payload)`` available on ``conn``."""
        # apsw types the function as variadic; this one takes exactly its one argument.
        conn.create_scalar_function(FUNCTION, self.inflate, 1, deterministic=True)  # type: ignore[arg-type]

    def compress(self, data: bytes) -> bytes:
        """The stored form of canonical payload bytes (themselves when there is no dictionary)."""
        if not self._dictionaries:
            return data
        if self._compressor is None:
            self._make()
            assert self._compressor is not None
        return self._compressor.compress(data)

    def inflate(self, stored: Any) -> Any:
        """The canonical bytes of a stored payload; stored bytes that are not a readable frame
        (see the module docstring) are returned as they are."""
        if type(stored) is not bytes or not stored.startswith(ZSTD_MAGIC):
            return stored
        decompressors = self._decompressors
        if decompressors is None:
            decompressors = self._make()
        try:
            params = self._frame(stored)
            size = params.content_size
            if size > MAX_PAYLOAD_BYTES:  # also "unknown" (ZSTD_CONTENTSIZE_UNKNOWN is huge)
                return stored
            return decompressors[params.dict_id].decompress(stored)
        except (self._error, KeyError):
            return stored

    def inflate_many(self, stored: Sequence[Any]) -> list[Any]:
        """:meth:`inflate` of each stored payload, in order. When every one is a frame whose
        header declares at most :data:`MAX_PAYLOAD_BYTES` and names one dictionary, and every
        one decompresses, they are decompressed with no Python code per payload; anything else
        takes :meth:`inflate` one by one, so the result is always exactly its."""
        if not stored or set(map(type, stored)) != {bytes}:
            return list(map(self.inflate, stored))
        decompressors = self._decompressors
        if decompressors is None:
            decompressors = self._make()
        try:
            if all(map(bytes.startswith, stored, repeat(ZSTD_MAGIC))):
                params = list(map(self._frame, stored))
                ids = set(map(_DICT_ID, params))
                if len(ids) == 1 and max(map(_CONTENT_SIZE, params)) <= MAX_PAYLOAD_BYTES:
                    decompressor = decompressors.get(ids.pop())
                    if decompressor is not None:
                        return list(map(decompressor.decompress, stored))
        except self._error:
            pass  # one of them is not a readable frame: each is read on its own
        return list(map(self.inflate, stored))
