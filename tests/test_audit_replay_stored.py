"""``audit replay`` recognises a repeated record by its stored bytes, before decompressing it:
the same stored bytes read through the same dictionaries are the same payload. Its summary must
be exactly that of the plain replay (``repeats=False``, every record read through the SQL
function and decided) for logs that hold the same payloads in different stored forms (records
written before compression, uncompressed, beside compressed copies), across sealed segments, and
when a segment's dictionary no longer reads its frames; and it decides each distinct stored
payload once."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing.ops import replay as replay_module
from rensei_routing.ops.replay import Sources, replay_chain
from rensei_routing.store.audit import AuditLog, rotation
from rensei_routing.store.codec import ZSTD_MAGIC, Codec, shipped_dictionary
from rensei_routing.store.db import connect
from rensei_routing.store.home import Home

DATA = Path(__file__).resolve().parent / "data"
STAMP = "2026-08-22T10:00:00.000000Z"


def _home(name: str, into: Path) -> Home:
    """A copy of the kept home ``name``, migrated (a reader never migrates)."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(DATA / name, into)
    home = Home(into)
    connect(home.db_path, write=True).close()
    return home


def _both(home: Home, since: int = 0, cache: int = 20_000) -> tuple[Any, Any, int]:
    """The fast replay's summary, the plain one's, and how many payloads the fast one decided."""
    decided = 0
    outcome = replay_module._Replay.outcome

    def counted(self: Any, seq: int, data: bytes) -> Any:
        nonlocal decided
        decided += 1
        return outcome(self, seq, data)

    with AuditLog.open(home) as log, mock.patch.object(replay_module, "CACHE_SIZE", cache):
        with mock.patch.object(replay_module._Replay, "outcome", counted):
            fast = replay_chain(log, Sources(home), since=since)
        plain = replay_chain(log, Sources(home), since=since, repeats=False)
    return fast, plain, decided


def _stored(home: Home) -> Iterator[tuple[int, bytes, bytes]]:
    """``(seq, stored bytes, canonical bytes)`` of every record, read in small pages."""
    with AuditLog.open(home) as log:
        for codec, rows in log.stored_payloads(batch=7):
            for seq, data in rows:
                yield seq, data, bytes(codec.inflate(data))


@pytest.mark.parametrize("name", ["compact_v1_home", "v2_home", "v8_segments_home"])
def test_the_kept_homes_replay_the_same_read_as_stored(name: str, tmp_path: Path) -> None:
    """Every record format the log has written (uncompressed before schema 3, the earlier
    compact explanation, sealed segments) replays read as stored as it does read inflated."""
    home = _home(name, tmp_path / "h")
    fast, plain, _ = _both(home)
    assert fast == plain
    with AuditLog.open(home) as log:
        seqs = [r.seq for r in log.records()]
    assert [seq for seq, _, _ in _stored(home)] == seqs  # every record, in order, in pages


@settings(  # a health check list replaces the suite profile's, so it names too_slow again
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=30),
    rotate_after=st.none() | st.integers(min_value=0, max_value=30),
    since=st.integers(min_value=0, max_value=30),
    cache=st.sampled_from([1, 2, 20_000]),
)
def test_copies_stored_in_other_forms_and_segments_replay_as_the_plain_path(
    tmp_path: Path, picks: list[int], rotate_after: int | None, since: int, cache: int
) -> None:
    """The v2 home's uncompressed decisions (and a tampered copy of some), appended again
    compressed, some of them sealed into a segment: the same summary as the plain replay, and
    (with room in the cache) one decision per distinct stored payload."""
    home = _home("v2_home", tmp_path / "h")
    with AuditLog.open(home) as log:
        payloads = [r.payload for r in log.records()]
        variants = [*payloads, *({**p, "account_id": "forged"} for p in payloads[:3])]
        chosen = [variants[i % len(variants)] for i in picks]
        if rotate_after is not None:
            log.append_many(chosen[:rotate_after], recorded_at=STAMP)
            assert rotation.rotate(log) is not None
            chosen = chosen[rotate_after:]
        log.append_many(chosen, recorded_at=STAMP)
    fast, plain, decided = _both(home, since=since, cache=cache)
    assert fast == plain
    stored = [(data, payload) for seq, data, payload in _stored(home) if seq >= since]
    if cache == 20_000:
        assert decided == len({data for data, _ in stored})
    assert fast.replayed == len(stored)
    assert fast.mismatched == sum(1 for _, payload in stored if b"forged" in payload)


def test_a_segment_whose_dictionary_differs_is_read_through_its_own(tmp_path: Path) -> None:
    """A sealed segment whose stored dictionary (same id) no longer reads its frames: its
    records are unreadable to the plain replay, so must they be to the fast one, though the
    live records hold the very same stored bytes, read well through the home's dictionary."""
    home = _home("v2_home", tmp_path / "h")
    with AuditLog.open(home) as log:
        payloads = [r.payload for r in log.records()]
        log.append_many(payloads, recorded_at=STAMP)  # compressed copies
        done = rotation.rotate(log)
        assert done is not None
        log.append_many(payloads, recorded_at=STAMP)  # the same stored bytes, live
        segment = log._sealed.path(done.segment)
    os.chmod(segment, 0o644)
    conn = apsw.Connection(str(segment))
    try:
        ((dict_id, body),) = list(conn.execute("SELECT id, body FROM audit_dictionaries"))
        assert body == shipped_dictionary()
        damaged = body[:1024] + bytes(b ^ 0x5A for b in body[1024:])
        conn.execute("UPDATE audit_dictionaries SET body = ? WHERE id = ?", (damaged, dict_id))
    finally:
        conn.close()
    os.chmod(segment, 0o444)
    fast, plain, _ = _both(home)
    assert fast == plain
    # The segment's uncompressed records and the live copies match; its frames do not read.
    assert plain.matched == 2 * len(payloads)
    assert plain.unreplayable == {"unreadable payload": len(payloads)}
    live = [data for _, data, _ in _stored(home)][-len(payloads) :]
    assert all(data.startswith(ZSTD_MAGIC) for data in live)


def test_codecs_read_alike_only_with_the_same_dictionaries() -> None:
    body = shipped_dictionary()
    assert Codec({1: body}).reads_as(Codec({1: body}))
    assert not Codec({1: body}).reads_as(Codec({2: body}))
    assert not Codec({1: body}).reads_as(Codec({1: body[:-1] + b"x"}))
    assert not Codec({1: body}).reads_as(Codec({}))
