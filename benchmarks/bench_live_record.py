"""Benchmark, live-record: the live path's recording, one request at a time and from threads.

Every request is one spawn an armed canary governs, answered by ``Enforcer.enforce``: decide
under the pinned revision (10, 100 and 1,000 policies, one of which claims the repository)
and commit the enforced-decision record before answering. Rows, each beside a baseline timed
in the same loop (request ``i``, then baseline ``i``, so both see the same machine):

* ``decide + record, durable``: the home's defaults (WAL, ``synchronous=FULL``: one sync per
  commit). Baseline: **one durable append of the same record** (the bytes the request
  stored, read back, appended as they are: ``append_encoded``, no encoding) to a log of its
  own with the same settings.
* ``decide + record, no sync``: the same on a scratch home whose log writer runs with
  ``synchronous=OFF`` (set on that connection by this benchmark, never a library setting): the
  like-for-like row against tools that never sync. Baseline: one append of the same record to
  a log of its own, also ``synchronous=OFF``.

p50, p95 and p99 per request are reported; these rows carry no target.

* ``8 threads recording durably``: eight threads, each with an Enforcer of its own on one home,
  each answering its requests one after another; records/s beside one thread doing the same,
  measured before and after (their mean). The threads share commits (one process's appends to
  one file share write transactions: docs/store.md). Target, at 1,000 policies: at least 4x one
  thread's records/s. The 100-policy row is printed without a target: there the default record
  still carries the full per-policy trace (~13 KB), whose encoding is CPU under the GIL, so on
  two cores the threads are bound by it, not by the syncs they share. Every answer's record is
  checked present and the chain verifies. In these rows every request asks the same question
  (one spawn, repeated), so an Enforcer answers all but its first from the question's kept
  decision and record template (docs/enforcement.md). A further row, without a target, asks a
  new question at every request (each spawn's principal its own), so every request decides and
  encodes afresh: the shared commits where nothing is kept. A last row, also without a target,
sets ``[audit] checkpoint_every = 1000`` on its home, so the threads pass automatic checkpoints
while they record: each is signed after the append that reaches it and stored in the write
transaction the threads share, and the row checks they all were.

Beside the held row, and without a target, its bound on this machine: the same eight threads
on a scratch home whose log writers never sync, against the held row's one durable thread.
Sharing commits can at best make the durable threads as fast as these (every sync free), so
this ratio (the faster of two rounds, one before and one after a round of one thread with no
sync) is the most the held row can show with this work per record and this machine's sync;
its note gives what share of it the durable threads reached, and one thread with no sync.

Each thread row's note gives the process's CPU per record (every thread's, user and system) at
eight threads and at one. A last figure, without a baseline or a target, is what the thread
rows pay per request besides their work: the time for one thread to wake another waiting on a
lock and hand it the interpreter (two threads passing two locks back and forth), measured in the
same run, since it depends on the machine (on a virtual machine, on waking an idle CPU).

A ``--quick`` run measures at smoke sizes: its target is printed as not applicable.
Reproduce: ``python -m benchmarks --only live-record``.
"""

from __future__ import annotations

import datetime as dt
import resource
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from rensei_routing.core.enforce.gate import GateBar
from rensei_routing.core.enforce.route import EnforcedRoute
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.enforce import Enforcer, arm
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from .bench_enforce import REPO, _home, _now, _policies, _spawn
from .bench_shadow import _registry
from .harness import BenchResult, Config, Figure, progress

NAME = "live-record"
TITLE = "decide + record per request (durable, no sync) vs one append; 8 threads vs 1"

SIZES = (10, 100, 1_000)
PERCENTILES = (50, 95, 99)
THREADS = 8
#: The thread rows' policy counts: the first is held to the target.
THREAD_POLICIES = (1_000, 100)
#: Eight threads recording durably: at least this many times one thread's records/s.
THREAD_TARGET = 4.0
WARM = 20
#: The row whose threads pass automatic checkpoints: one every this many records.
CHECKPOINT_ROW_EVERY = 1_000


def _armed_home(root: Path, name: str, policies: int) -> Home:
    """A home whose canary of :data:`REPO` is armed on a revision of ``policies`` policies."""
    home = _home(root, name, _policies(policies))
    with ShadowRecorder(home, _registry(), clock=_now) as recorder:
        recorder.record_many([_spawn()] * 20)  # the evidence the gate reads
    armed = arm(home, REPO, now=dt.datetime.now(dt.UTC), actor="bench", bar=GateBar(min_samples=20))
    if armed.gate.verdict.verdict != "pass":
        raise RuntimeError(f"the gate did not pass: {armed.gate.verdict}")
    return home


def _no_sync(log: AuditLog) -> None:
    """This benchmark's scratch setting: the log's writer connection stops syncing."""
    log._write_conn().pragma("synchronous", "OFF")


def percentile(samples: Sequence[float], pct: int) -> float:
    """The ``pct``-th percentile of sorted ``samples`` (nearest rank)."""
    index = max(0, min(len(samples) - 1, -(-len(samples) * pct // 100) - 1))
    return samples[index]


def _per_request(
    res: BenchResult, tmp: Path, size: int, count: int, *, sync: bool
) -> tuple[list[float], list[float]]:
    """Sorted per-request seconds of ``count`` enforced requests and of the baseline appends."""
    tag = "durable" if sync else "nosync"
    home = _armed_home(tmp, f"{tag}-{size}", size)
    base_home = _home(tmp, f"{tag}-{size}-append", None)
    spawn = _spawn()
    ours: list[float] = []
    base: list[float] = []
    with (
        Enforcer(home, _registry(), clock=_now) as enforcer,
        AuditLog.open(home) as reader,
        AuditLog.open(base_home) as base_log,
    ):
        first = enforcer.enforce(spawn)  # open, load the pin
        res.check(isinstance(first, EnforcedRoute), f"{tag}, {size:,} policies: enforced")
        assert isinstance(first, EnforcedRoute)
        if not sync:
            _no_sync(enforcer._audit())
            _no_sync(base_log)
        clock = time.perf_counter
        for i in range(WARM + count):
            start = clock()
            answer = enforcer.enforce(spawn)
            middle = clock()
            if not isinstance(answer, EnforcedRoute):
                res.check(False, f"{tag}, {size:,} policies: a request answered {answer!r}")
            assert isinstance(answer, EnforcedRoute)
            stored = reader.get(answer.seq).payload_bytes  # the record it stored (untimed)
            middle2 = clock()
            base_log.append_encoded((stored,), recorded_at=_now())
            end = clock()
            if i >= WARM:
                ours.append(middle - start)
                base.append(end - middle2)
        res.check(
            reader.count() == first.seq + 1 + WARM + count and bool(reader.verify()),
            f"{tag}, {size:,} policies: every request recorded, the chain verifies",
        )
    ours.sort()
    base.sort()
    return ours, base


def _latency_figures(
    row: str, size: int, ours: Sequence[float], base: Sequence[float], label: str
) -> list[Figure]:
    out = []
    for pct in PERCENTILES:
        value, floor = percentile(ours, pct) * 1e3, percentile(base, pct) * 1e3
        out.append(
            Figure(
                case=f"{row}, {size:,} policies, p{pct}",
                value=value,
                unit="ms",
                baseline=floor,
                baseline_label=label,
                ratio=value / floor,
                ratio_kind="time",
                note=f"{len(ours):,} requests, one at a time" if pct == 50 else "",
            )
        )
    return out


def _fresh_spawns(tag: str, count: int) -> list[Spawn]:
    """``count`` spawns, each a question of its own (its principal named ``tag`` and its
    index): no Enforcer has decided any of them before."""
    spawn = _spawn()
    return [replace(spawn, principal_id=f"implementer-{tag}-{i}") for i in range(count)]


def _cpu_s() -> float:
    """The process's CPU seconds so far, every thread's, user and system (the WAL writes and
    the sync's system calls are CPU too)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _rate(
    home: Home, threads: int, per_thread: int, *, fresh: str | None = None, sync: bool = True
) -> tuple[float, list[int], float]:
    """Records/s of ``threads`` threads answering ``per_thread`` requests each (an Enforcer
    each, opened and warmed before the clock starts), the seqs they were answered with, and
    the process's CPU seconds per record while they ran.
    ``fresh`` (a tag no other round uses): every request a new question
    (:func:`_fresh_spawns`, built before the clock starts); else the same spawn every time.
    Without ``sync``, every Enforcer's log writer runs with ``synchronous=OFF`` (a scratch
    home's: :func:`_no_sync`), so whichever thread leads a shared commit never syncs."""
    spawn = _spawn()
    asks = [
        [spawn] * per_thread if fresh is None else _fresh_spawns(f"{fresh}-{k}", per_thread)
        for k in range(threads)
    ]
    seqs: list[list[int]] = [[] for _ in range(threads)]
    with ExitStack() as stack:
        enforcers = [
            stack.enter_context(Enforcer(home, _registry(), clock=_now)) for _ in range(threads)
        ]
        for enforcer in enforcers:
            enforcer.enforce(spawn)  # open, load the pin
            if not sync:
                _no_sync(enforcer._audit())
        start_line = threading.Barrier(threads + 1)

        def work(k: int) -> None:
            start_line.wait()
            mine, enforce = seqs[k], enforcers[k].enforce
            for asked in asks[k]:
                answer = enforce(asked)
                mine.append(answer.seq if isinstance(answer, EnforcedRoute) else -1)

        workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        start_line.wait()
        start, cpu = time.perf_counter(), _cpu_s()
        for w in workers:
            w.join()
        elapsed, cpu = time.perf_counter() - start, _cpu_s() - cpu
    count = threads * per_thread
    return count / elapsed, [s for mine in seqs for s in mine], cpu / count


def _threads(
    res: BenchResult,
    tmp: Path,
    cfg: Config,
    policies: int,
    held: bool,
    *,
    fresh: bool = False,
    checkpoint_every: int | None = None,
) -> None:
    tag = "-fresh" if fresh else f"-cp{checkpoint_every}" if checkpoint_every else ""
    home = _armed_home(tmp, f"threads-{policies}{tag}", policies)
    if checkpoint_every is not None:
        home.config_path.write_text(f"[audit]\ncheckpoint_every = {checkpoint_every}\n")
    single, each = _requests(cfg)
    answered: list[int] = []
    rates: dict[str, list[float]] = {"one": [], "eight": []}
    cpus: dict[str, list[float]] = {"one": [], "eight": []}
    rounds = (("one", 1, single), ("eight", THREADS, each), ("one", 1, single))
    for n, (which, threads, per) in enumerate(rounds):
        progress(f"{NAME}: {threads} thread(s) x {per:,} requests, {policies:,} policies")
        rate, seqs, cpu = _rate(home, threads, per, fresh=f"{n}" if fresh else None)
        rates[which].append(rate)
        cpus[which].append(cpu)
        answered += seqs
    with AuditLog.open(home) as log:
        stored = {r.seq: r.payload.get("record_type") for r in log.records()}
        if checkpoint_every is not None:
            signed = log._read_conn().execute("SELECT count(*) FROM audit_checkpoints").get
            res.check(
                int(signed) >= log.count() // checkpoint_every,
                f"an automatic checkpoint stored every {checkpoint_every:,} records",
            )
        res.check(
            -1 not in answered and len(set(answered)) == len(answered),
            f"{len(answered):,} requests answered, each with a record of its own",
        )
        res.check(
            all(stored.get(s) == stored[answered[0]] for s in answered) and bool(log.verify()),
            "every answered request's record is stored; the chain verifies",
        )
    one = _mean(rates["one"])
    eight = rates["eight"][0]
    ratio = eight / one
    target = f">= {THREAD_TARGET:.0f}x"
    res.figures.append(
        Figure(
            case=f"{THREADS} threads recording durably, {policies:,} policies"
            + (", a new question every request" if fresh else "")
            + (
                f", an automatic checkpoint every {checkpoint_every:,} records"
                if checkpoint_every
                else ""
            ),
            value=eight,
            unit="records/s",
            baseline=one,
            baseline_label="1 thread",
            ratio=ratio,
            target=(target + (" (full run: n/a at --quick)" if cfg.quick else "")) if held else "",
            passed=None if cfg.quick or not held else ratio >= THREAD_TARGET,
            note=f"{THREADS} x {each:,} requests vs 1 x {single:,} (before and after, mean); "
            "each thread an Enforcer of its own, every request a durable record"
            + ("; each request's spawn a principal of its own: nothing kept" if fresh else "")
            + f"; process CPU per record {_mean(cpus['eight']) * 1e6:,.0f} us at {THREADS} "
            f"threads, {_mean(cpus['one']) * 1e6:,.0f} us at 1",
        )
    )
    if held:
        res.figures.append(_no_sync_ceiling(res, tmp, cfg, policies, one, eight))


def _no_sync_ceiling(
    res: BenchResult, tmp: Path, cfg: Config, policies: int, one: float, eight: float
) -> Figure:
    """The held row's bound: the same eight threads on a scratch home that never syncs (the
    faster of two rounds), against one durable thread (``one``). Sharing commits can at best
    make the eight durable threads (``eight``) as fast as these, so their ratio is the most the
    held row could reach on this machine with this work per record; one thread without syncs
    is in the note."""
    home = _armed_home(tmp, f"threads-{policies}-nosync", policies)
    single, each = _requests(cfg)
    progress(f"{NAME}: {THREADS} threads and 1, no sync, {policies:,} policies")
    # Eight threads before and after the one, the faster kept: a bound is a best case.
    first, seqs, cpu = _rate(home, THREADS, each, sync=False)
    alone, alone_seqs, _ = _rate(home, 1, single, sync=False)
    again, more_seqs, cpu_again = _rate(home, THREADS, each, sync=False)
    rate, cpu = (first, cpu) if first >= again else (again, cpu_again)
    answered = seqs + alone_seqs + more_seqs
    with AuditLog.open(home) as log:
        stored = {r.seq for r in log.records()}
        res.check(
            -1 not in answered
            and len(set(answered)) == len(answered)
            and stored.issuperset(answered)
            and bool(log.verify()),
            "no sync: every answered request has a record of its own; the chain verifies",
        )
    return Figure(
        case=f"{THREADS} threads recording with no sync (scratch home, synchronous=OFF), "
        f"{policies:,} policies",
        value=rate,
        unit="records/s",
        baseline=one,
        baseline_label="1 thread, durable",
        ratio=rate / one,
        note=f"the faster of 2 rounds; the most shared commits could give the held row here "
        f"(every sync free): the "
        f"durable eight reached {eight / rate:.0%} of it; {THREAD_TARGET:.0f}x the durable "
        f"thread is {THREAD_TARGET * one:,.0f}/s, one thread with no sync at all "
        f"{alone:,.0f}/s; process CPU per record {cpu * 1e6:,.0f} us at {THREADS} threads",
    )


def _requests(cfg: Config) -> tuple[int, int]:
    """Requests per round of the thread rows: ``(one thread's, each of eight's)``."""
    return (40, 20) if cfg.quick else (300, 200)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _hand_off_us(rounds: int) -> float:
    """Microseconds for one thread to wake another waiting on a lock and hand it the
    interpreter: two threads passing two locks back and forth, ``rounds`` round trips of two
    hand-offs each. A request answered through a shared commit pays at least one: its caller
    sleeps until the record is durable, and another thread has to take the interpreter."""
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def other() -> None:
        for _ in range(rounds):
            ping.acquire()
            pong.release()

    thread = threading.Thread(target=other)
    thread.start()
    start = time.perf_counter()
    for _ in range(rounds):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed / (2 * rounds) * 1e6


def _hand_off_figure(cfg: Config) -> Figure:
    rounds = 2_000 if cfg.quick else 20_000
    samples = sorted(_hand_off_us(rounds) for _ in range(3))
    return Figure(
        case="one thread waking another (two threads passing a lock), per hand-off",
        value=samples[1],
        unit="us",
        note=f"median of 3 x {rounds:,} round trips ({samples[0]:.1f}-{samples[2]:.1f} us); "
        "each request of the thread rows pays at least one",
    )


def _rows() -> tuple[tuple[str, bool, str], ...]:
    return (
        ("decide + record, durable", True, "one durable append of the same record"),
        (
            "decide + record, no sync (scratch home, synchronous=OFF)",
            False,
            "one append of the same record, synchronous=OFF",
        ),
    )


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    counts: dict[bool, int] = {True: 60, False: 200} if cfg.quick else {True: 1_000, False: 3_000}
    with tempfile.TemporaryDirectory(prefix="rensei-bench-live-record-") as tmp:
        for size in SIZES:
            for row, sync, label in _rows():
                progress(f"{NAME}: {row}, {size:,} policies, {counts[sync]:,} requests")
                ours, base = _per_request(res, Path(tmp), size, counts[sync], sync=sync)
                res.figures.extend(_latency_figures(row, size, ours, base, label))
        for i, policies in enumerate(THREAD_POLICIES):
            _threads(res, Path(tmp), cfg, policies, held=i == 0)
        _threads(res, Path(tmp), cfg, THREAD_POLICIES[0], held=False, fresh=True)
        _threads(
            res,
            Path(tmp),
            cfg,
            THREAD_POLICIES[0],
            held=False,
            checkpoint_every=CHECKPOINT_ROW_EVERY // (10 if cfg.quick else 1),
        )
        res.figures.append(_hand_off_figure(cfg))
    res.notes.append(
        "each request: Enforcer.enforce of one gateway spawn of acme/widgets, the canary pinned "
        "to a revision of that many policies (one claims the repository), answered after its "
        "enforced-decision record commits; the baseline appends that same record's stored bytes "
        "to a log of its own with the same sync setting"
    )
    return res
