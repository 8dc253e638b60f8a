"""One suite, two backends: the control store's promises on SQLite (the home's file) and on
PostgreSQL (a database of a real throwaway cluster on loopback), through the same
``ControlStore`` interface (issue 23, part 1).

Revisions per org, unique and gap-free with several writers at once; validation before
publishing; no write half-applied; one compile at a time and ``only_if_stale`` deciding under
the compile lock; the control side's audit records committed with their writes.
"""

from __future__ import annotations

import multiprocessing
import threading
from datetime import UTC
from pathlib import Path

import pytest

from rensei_routing.core.snapshot.validators import SnapshotValidator
from rensei_routing.errors import PolicyValidationError, SnapshotValidationError
from rensei_routing.store.control import (
    EVENT_COMPILE,
    EVENT_ORG,
    EVENT_POLICY,
    EVENT_RESEAL,
)

from .control_backends import BACKENDS, ControlHome, T, control_home, org_data, policies


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str | None:
    if backend == "sqlite":
        return None
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def ctl(tmp_path: Path, backend: str, url: str | None) -> ControlHome:
    return control_home(tmp_path / "home", backend, url)


def _compile(c: ControlHome, *, at: str = T, only_if_stale: bool = False, **kw: object) -> object:
    key = c.home.private_key()
    store = c.open()
    try:
        return store.compile_current(
            compiled_at=at,
            signing_key_id=key.public_key.key_id,
            sign=kw.pop("sign", key.sign),  # type: ignore[arg-type]
            only_if_stale=only_if_stale,
            **kw,  # type: ignore[arg-type]
        )
    finally:
        store.close()


def _writer(root: str, backend: str, url: str | None, worker: int, n: int) -> None:
    """One writing process: ``n`` policy saves, org loads and compiles, interleaved."""
    from rensei_routing.store.home import Home

    from .control_backends import ControlHome as CH

    c = CH(Home(Path(root)), url)
    store = c.open()
    key = c.home.private_key()
    try:
        for i in range(n):
            store.save_policies(policies(f"w{worker}-{i}"), saved_at=T)
            store.save_org(org_data(f"w{worker}-{i}"), saved_at=T)
            store.compile_current(
                compiled_at=f"2026-11-29T12:00:{worker:02d}.{i:06d}Z",
                signing_key_id=key.public_key.key_id,
                sign=key.sign,
            )
    finally:
        store.close()


def test_revisions_are_per_org_unique_and_gap_free_under_concurrent_processes(
    tmp_path: Path, backend: str, url: str | None
) -> None:
    homes = [control_home(tmp_path / org, backend, url, org=org) for org in ("acme", "globex")]
    workers, n = 4, 5
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_writer, args=(str(c.home.path), backend, url, w, n))
        for c in homes
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0, f"a writer failed (exit {p.exitcode})"
    for c in homes:
        store = c.open(write=False)
        try:
            assert [r.revision for r in store.policy_history()] == list(range(1, workers * n + 1))
            assert store.source_revisions() == (workers * n, workers * n)
            snaps = store.snapshot_history()
            assert [s.revision for s in snaps] == list(range(1, workers * n + 1))
            assert {s.ruleset_rev.split("@")[0] for s in snaps} == {c.home.info().org}
            events = store.events()
            assert [e.seq for e in events] == list(range(1, 3 * workers * n + 1))
        finally:
            store.close()


def test_threads_sharing_one_store_allocate_gap_free(ctl: ControlHome) -> None:
    store = ctl.open()
    errors: list[BaseException] = []

    def save(i: int) -> None:
        try:
            for j in range(5):
                store.save_policies(policies(f"t{i}-{j}"), saved_at=T)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors
        assert [r.revision for r in store.policy_history()] == list(range(1, 21))
    finally:
        store.close()


def test_invalid_policies_are_refused_before_anything_is_written(ctl: ControlHome) -> None:
    store = ctl.open()
    try:
        store.save_policies(policies("a"), saved_at=T)
        before = ctl.state()
        with pytest.raises(PolicyValidationError):
            store.save_policies(policies("dup", "dup"), saved_at=T)
        assert ctl.state() == before
        assert store.load_policies().snapshot.revision == 1
    finally:
        store.close()


def test_a_failing_validator_publishes_nothing(ctl: ControlHome) -> None:
    store = ctl.open()
    store.save_policies(policies("a"), saved_at=T)
    store.close()
    before = ctl.state()
    refuse = SnapshotValidator(name="refuse-all", check=lambda sections: ["no"])
    with pytest.raises(SnapshotValidationError) as info:
        _compile(ctl, validators=[refuse])
    assert [r.name for r in info.value.failed] == ["refuse-all"]
    assert ctl.state() == before


def test_a_compile_failing_mid_transaction_leaves_nothing_and_no_number_used(
    ctl: ControlHome,
) -> None:
    """The signature is made inside the publishing transaction: a signer that fails there
    rolls back the whole compile (row, counter, audit record)."""
    store = ctl.open()
    store.save_policies(policies("a"), saved_at=T)
    store.close()
    before = ctl.state()

    def broken(message: bytes) -> bytes:
        raise RuntimeError("the signer died")

    with pytest.raises(RuntimeError):
        _compile(ctl, sign=broken)
    assert ctl.state() == before
    result = _compile(ctl)
    assert result.snapshot.revision == 1  # type: ignore[attr-defined]


def test_only_if_stale_decides_under_the_lock_and_reseal_once_per_period(
    ctl: ControlHome,
) -> None:
    from datetime import datetime, timedelta

    store = ctl.open()
    store.save_policies(policies("a"), saved_at=T)
    store.close()
    first = _compile(ctl, only_if_stale=True)
    assert first is not None
    assert _compile(ctl, at="2026-11-29T12:00:01.000000Z", only_if_stale=True) is None
    store = ctl.open()
    key = ctl.home.private_key()
    lookup = ctl.home.snapshot_lookup()
    try:
        later = "2026-11-29T12:05:00.000000Z"
        moment = datetime(2026, 11, 29, 12, 5, tzinfo=UTC)
        args = {"signing_key_id": key.public_key.key_id, "sign": key.sign, "lookup": lookup}
        fresh = store.reseal(compiled_at=later, older_than=moment - timedelta(minutes=2), **args)
        assert fresh is not None and fresh.compiled_at == later
        again = store.reseal(
            compiled_at="2026-11-29T12:05:01.000000Z",
            older_than=moment - timedelta(minutes=2),
            **args,
        )
        assert again is None  # another replica's re-seal already covers this period
        assert store.latest_mark() == (1, later)
        kinds = [e.kind for e in store.events()]
        assert kinds == [EVENT_POLICY, EVENT_COMPILE, EVENT_RESEAL]
    finally:
        store.close()


def test_every_write_is_an_audit_record_committed_with_it(ctl: ControlHome) -> None:
    store = ctl.open()
    try:
        saved = store.save_policies(policies("a", "b"), saved_at=T)
        org_rev, created = store.save_org(org_data(), saved_at=T)
        assert created
    finally:
        store.close()
    compiled = _compile(ctl)
    store = ctl.open(write=False)
    try:
        events = store.events()
    finally:
        store.close()
    assert [(e.kind, e.revision) for e in events] == [
        (EVENT_POLICY, saved.revision),
        (EVENT_ORG, org_rev),
        (EVENT_COMPILE, compiled.snapshot.revision),  # type: ignore[attr-defined]
    ]
    assert events[0].content_hash == saved.content_hash
    assert events[2].content_hash == compiled.snapshot.content_hash  # type: ignore[attr-defined]
    assert [e.seq for e in events] == [1, 2, 3]


def test_the_stored_snapshot_reads_back_verified(ctl: ControlHome) -> None:
    store = ctl.open()
    store.save_policies(policies("a"), saved_at=T)
    store.save_org(org_data(), saved_at=T)
    store.close()
    compiled = _compile(ctl).snapshot  # type: ignore[attr-defined]
    store = ctl.open(write=False)
    try:
        assert store.envelope() == compiled.to_bytes()
        loaded = store.load_snapshot(lookup=ctl.home.snapshot_lookup())
        assert loaded.content_hash == compiled.content_hash
        assert store.compiled_from() == (1, 1)
        assert store.load_org()[0] == 1
        assert (
            store.load_policies(1).snapshot.content_hash == store.policy_history()[0].content_hash
        )
    finally:
        store.close()


def test_identical_org_data_is_a_no_op_on_both_backends(ctl: ControlHome) -> None:
    """Issue 22 edge 14 through the control store: the same content again writes no revision,
    no control event, and leaves nothing to recompile; different content is the next revision."""
    store = ctl.open()
    try:
        assert store.save_org(org_data(), saved_at=T) == (1, True)
        store.save_policies(policies("a"), saved_at=T)
    finally:
        store.close()
    _compile(ctl)
    store = ctl.open()
    try:
        before = [(e.seq, e.kind) for e in store.events()]
        assert store.save_org(org_data(), saved_at=T) == (1, False)
        assert [(e.seq, e.kind) for e in store.events()] == before
        assert store.source_revisions() == (1, 1)
        assert store.compiled_from() == (1, 1)  # nothing to recompile
        assert store.save_org(org_data("changed"), saved_at=T) == (2, True)
        assert store.source_revisions() == (1, 2)
    finally:
        store.close()
