"""Benchmark audit-tree: what the Merkle tree under the audit chain costs, each path measured
beside the same path without the tree in the same run.

* Durable appends (``append``, one record per transaction, and ``append_many`` of 1,000) on a
  log that extends its tree, against the same ``AuditLog`` on a home whose tree storage is
  emptied once the log is open: ``tree.Appender.at`` then finds no tree and the records are
  appended alone (the baseline keeps the one ``SELECT`` of the tree's last row that finds it
  gone). Transactions alternate between the two logs. Target: at least 0.8x.
* ``verify()`` (the chain and the tree) of a log written by the default path (automatic
  tree-root checkpoints every ``checkpoint_every`` records, the last stretch past the latest
  one) against ``chainwalk.verify_all(..., tree=False)`` on the same log: the chain walk alone,
  the verification as it was before the tree. Both in fresh processes, on every core and in one
  process, interleaved rounds, fastest kept (as chain-verify measures). Target (1M records, all
  cores): at least 0.8x.
* Proofs at 1M records (``--quick``: at its size): for random records, the inclusion proof
  (``AuditLog.inclusion_proof``), and the whole C2SP tlog-proof file (the record's export line
  as ``extra``, the path, the stored checkpoint), per record in microseconds; verification of
  the file (parse, the log's signature under a one-key witness policy, the audit path from the
  record's hash); the file's size and the path's, in bytes.
* Memory: peak resident memory of a process building the tree (``tree.catch_up``, what a home
  made before the tree runs on its first writer, the same extension an append makes) and of
  ``verify()`` (its parent and largest worker), at 100k, 1M and 10M records (``--quick``: 2k and
  20k; the 10M row is "n/a (quick)"). Target: flat. These logs hold small payloads (the tree
  never reads a payload; the verify walk does, so its figure is the walk's at any payload size).

The logs are built as chain-verify builds them (pre-encoded decision payloads, ``link_rows``,
50,000-row transactions), extending the tree in the same transaction as an append does; a
small log built both ways is compared row for row, tree rows included.

    python -m benchmarks --only audit-tree
"""

from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from rensei_routing import signing
from rensei_routing.core.audit.archive import export_line
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.audit.cosignature import VerifierKey, WitnessPolicy
from rensei_routing.core.audit.tlog import TlogProof, parse_tlog_proof, verify_tlog_proof
from rensei_routing.core.timestamps import format_timestamp
from rensei_routing.store.audit import AuditLog, autocheckpoint, chainwalk
from rensei_routing.store.db import connect

from .bench_verify import ORIGIN, _build_checkpointed, _Builder, _fastest
from .harness import (
    REPO_ROOT,
    BenchResult,
    Config,
    Figure,
    Growth,
    flat_memory,
    progress,
    subprocess_env,
    timed,
)
from .workload import decision_payloads

NAME = "audit-tree"
TITLE = "the Merkle tree under the chain: appends, verify, proofs, memory vs the same without it"

TARGET_RATIO = 0.8
ROUNDS = 3
_INSERT = (
    "INSERT INTO audit_records(seq, recorded_at, prev_hash, payload_hash, record_hash, payload) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_TABLES = ("audit_records", "audit_tree")
_BASE_TIME = dt.datetime(2025, 6, 1, tzinfo=dt.UTC)


#: chain-verify's builder, which extends the stored tree in each transaction as an append does.
_TreeBuilder = _Builder


def _dump(path: Path) -> list[Any]:
    with closing(connect(path)) as conn:
        return [conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in _TABLES]


def _check_builder(res: BenchResult, tmp: Path, payloads: Sequence[Any]) -> None:
    """``append_many`` and :class:`_TreeBuilder` write the same rows and the same tree."""
    batches = (300, 300, 150)
    via_library = tmp / "append-many.db"
    with AuditLog(via_library, origin=ORIGIN) as log:
        start = 0
        for i, size in enumerate(batches):
            stamp = format_timestamp(_BASE_TIME + dt.timedelta(seconds=i))
            log.append_many(
                [payloads[(start + k) % len(payloads)] for k in range(size)], recorded_at=stamp
            )
            start += size
    builder = _TreeBuilder([encode_payload(p) for p in payloads])
    via_builder = tmp / "builder.db"
    with closing(connect(via_builder, write=True)) as conn:
        for size in batches:
            builder.extend(conn, size)
    res.check(
        _dump(via_library) == _dump(via_builder),
        f"fast log builder writes what append_many writes, tree included ({sum(batches)} rows)",
    )


# -- appends ----------------------------------------------------------------------------------


def _untreed(path: Path) -> AuditLog:
    """A log whose tree storage is emptied once its writer is open: it appends without it."""
    log = AuditLog(path, origin=ORIGIN)
    log.append({"open": True}, recorded_at=format_timestamp(_BASE_TIME))
    with closing(connect(path, write=True)) as conn, conn:
        conn.execute("DELETE FROM audit_tree")
    return log


def _appends(res: BenchResult, cfg: Config, tmp: Path, payloads: Sequence[Any]) -> None:
    plan = {1: 20, 1_000: 2} if cfg.quick else {1: 400, 1_000: 10}
    for batch, txns in plan.items():
        with_tree = AuditLog(tmp / f"tree-{batch}.db", origin=ORIGIN)
        with_tree.append({"open": True}, recorded_at=format_timestamp(_BASE_TIME))
        without = _untreed(tmp / f"plain-{batch}.db")
        spent = [0.0, 0.0]
        with closing(with_tree), closing(without):
            for t in range(txns):
                stamp = format_timestamp(_BASE_TIME + dt.timedelta(seconds=t + 1))
                chunk = [payloads[(t * batch + k) % len(payloads)] for k in range(batch)]
                order = (0, 1) if t % 2 == 0 else (1, 0)
                for side in order:
                    log = with_tree if side == 0 else without
                    with timed() as took:
                        if batch == 1:
                            log.append(chunk[0], recorded_at=stamp)
                        else:
                            log.append_many(chunk, recorded_at=stamp)
                    spent[side] += took[0]
            records = 1 + txns * batch
            res.check(
                with_tree.tree_size() == records and without.tree_size() == 0,
                f"append x{batch}: the tree covers every record of one log and none of the other",
            )
            res.check(
                bool(with_tree.verify()) and bool(without.verify()),
                f"append x{batch}: both logs verify",
            )
        rate, base = txns * batch / spent[0], txns * batch / spent[1]
        what = "append() (1 record per durable transaction)" if batch == 1 else "append_many x1000"
        res.figures.append(
            Figure(
                case=f"{what}, with the tree",
                value=rate,
                unit="records/s",
                baseline=base,
                baseline_label="the same append, tree storage gone",
                ratio=rate / base,
                target=f">= {TARGET_RATIO}x",
                passed=rate / base >= TARGET_RATIO,
                note=f"{txns} transactions each, alternating",
            )
        )


# -- verify -----------------------------------------------------------------------------------


def _measure(*args: str) -> dict[str, Any]:
    """One measurement in a fresh process (this module's :func:`main`)."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_tree", *args],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"bench_tree {args[0]} failed ({proc.returncode}): {proc.stderr}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _verify_side(path: Path, public: str, mode: str, workers: str) -> dict[str, Any]:
    """Subprocess side: ``verify()`` (``tree``) or the chain walk alone (``chain``)."""
    from ._worker import children_peak_kib, measured

    key = signing.PublicKey.from_text(public)
    n = None if workers == "all" else int(workers)
    with AuditLog(path, origin=ORIGIN, public_key=key) as log:
        log.head()
        verdict, memory = measured(
            lambda: chainwalk.verify_all(
                log, (), stored=True, progress=None, public=key, workers=n, tree=mode == "tree"
            )
        )
    found = verdict.tree
    return {
        "ok": bool(verdict.result),
        "records": verdict.result.records_checked,
        "checkpoints": verdict.result.checkpoints_checked,
        "tree": None if found is None else found.state,
        "tree_size": None if found is None else found.size,
        "workers_peak_kib": children_peak_kib(),
        **memory,
    }


def _verify(res: BenchResult, cfg: Config, tmp: Path, pool: Sequence[bytes]) -> Path:
    """The verify rows; returns the log (for the proofs)."""
    key = signing.generate()
    size = 20_000 if cfg.quick else 1_000_000
    every = 1_000 if cfg.quick else autocheckpoint.DEFAULT_CHECKPOINT_EVERY
    path = tmp / "verify.db"
    builder = _TreeBuilder(pool)
    progress(f"{NAME}: building {size:,} records with the tree, checkpointing every {every:,}")
    pinned, _ = _build_checkpointed(path, key, builder, size - every, every)
    with closing(connect(path, write=True)) as conn:
        builder.extend(conn, every)
        conn.pragma("wal_checkpoint(TRUNCATE)")
    res.check(pinned == size - every, f"the automatic checkpoints reach {size - every:,}")
    public = key.public_key.to_text()
    (path.parent / "verify.key").write_text(key.to_text(), encoding="ascii")
    rounds = 1 if cfg.quick else ROUNDS
    progress(f"{NAME}: verify {size:,} records, with and without the tree ({rounds} rounds)")
    tree_all, chain_all, tree_one, chain_one = _fastest(
        rounds,
        lambda: _measure("verify", str(path), public, "tree", "all"),
        lambda: _measure("verify", str(path), public, "chain", "all"),
        lambda: _measure("verify", str(path), public, "tree", "1"),
        lambda: _measure("verify", str(path), public, "chain", "1"),
    )
    for m in (tree_all, tree_one):
        res.check(
            m["ok"] and m["records"] == size and m["tree"] == "ok" and m["tree_size"] == size,
            f"verify() of {size:,} records: the chain and the tree hold",
        )
    for m in (chain_all, chain_one):
        res.check(
            m["ok"] and m["records"] == size and m["tree"] is None,
            f"the chain walk alone of {size:,} records holds",
        )
    for t, c, what, bar in (
        (tree_all, chain_all, "all cores", True),
        (tree_one, chain_one, "one process", False),
    ):
        rate, base = size / t["seconds"], size / c["seconds"]
        res.figures.append(
            Figure(
                case=f"verify() {size:,} records (chain and tree), {what}",
                value=rate,
                unit="records/s",
                baseline=base,
                baseline_label="the chain walk alone (verify_all tree=False)",
                ratio=rate / base,
                target=f">= {TARGET_RATIO}x" if bar else "",
                passed=rate / base >= TARGET_RATIO if bar else None,
                note=f"fastest of {rounds}; {t['seconds'] / size * 1e6:.2f} us vs "
                f"{c['seconds'] / size * 1e6:.2f} us per record",
            )
        )
    res.extra["verify"] = {
        "tree": tree_all,
        "chain": chain_all,
        "tree_1": tree_one,
        "chain_1": chain_one,
    }
    return path


# -- proofs -----------------------------------------------------------------------------------


def _proofs(res: BenchResult, cfg: Config, path: Path) -> None:
    key = signing.PrivateKey.from_text((path.parent / "verify.key").read_text(encoding="ascii"))
    samples = 200 if cfg.quick else 2_000
    with AuditLog(path, origin=ORIGIN, public_key=key.public_key) as log:
        size = log.tree_size()
        cp = max(log.checkpoints(), key=lambda c: c.size)
        rng = random.Random(32)
        seqs = [rng.randrange(cp.size) for _ in range(samples)]
        with timed() as path_time:
            paths = [log.inclusion_proof(seq, cp.size) for seq in seqs]
        with timed() as file_time:
            files = [
                TlogProof(
                    index=seq,
                    proof=tuple(log.inclusion_proof(seq, cp.size)),
                    checkpoint=cp,
                    extra=export_line(log.get(seq)),
                ).to_text()
                for seq in seqs
            ]
        leaves = [bytes.fromhex(log.get(seq).record_hash.split(":", 1)[1]) for seq in seqs]
    policy = WitnessPolicy(log=VerifierKey(name=ORIGIN, public_key=key.public_key.raw))

    with timed() as verify_time:
        for text, leaf in zip(files, leaves, strict=True):
            verify_tlog_proof(parse_tlog_proof(text), leaf, policy, signing.check_raw)
    res.check(
        len(paths) == samples, f"{samples} inclusion proofs against the checkpoint of {cp.size:,}"
    )
    per = 1e6 / samples
    mean_file = sum(len(f.encode()) for f in files) / samples
    mean_path = sum(32 * len(p) for p in paths) / samples
    at = f"{size:,} records"
    res.figures += [
        Figure(
            case=f"inclusion proof (audit path) per record, {at}",
            value=path_time[0] * per,
            unit="us",
            note=f"{samples} random records, AuditLog.inclusion_proof (informational)",
        ),
        Figure(
            case=f"tlog-proof file generation per record, {at}",
            value=file_time[0] * per,
            unit="us",
            note="the path, the record read and its export line, the stored checkpoint "
            "(informational)",
        ),
        Figure(
            case=f"tlog-proof verification per record, {at}",
            value=verify_time[0] * per,
            unit="us",
            note="parse, the log's Ed25519 signature, the audit path (informational)",
        ),
        Figure(
            case=f"tlog-proof size, {at}",
            value=mean_file,
            unit="bytes",
            note=f"mean; the audit path alone {mean_path:.0f} bytes "
            f"({mean_path / 32:.1f} hashes) (informational)",
        ),
    ]


# -- memory -----------------------------------------------------------------------------------


def _memory_side(path: Path, mode: str) -> dict[str, Any]:
    """Subprocess side: ``build`` (``tree.catch_up`` through a writer opening) or ``verify``."""
    from ._worker import children_peak_kib, measured

    with AuditLog(path, origin=ORIGIN) as log:
        log.head()
        if mode == "build":
            _, memory = measured(lambda: log._write_conn())
            return {"ok": True, "size": log.tree_size(), "workers_peak_kib": 0, **memory}
        result, memory = measured(lambda: log.verify_segments())
    return {
        "ok": bool(result.result) and result.tree is not None and result.tree.state == "ok",
        "size": result.result.records_checked,
        "workers_peak_kib": children_peak_kib(),
        **memory,
    }


def _memory(res: BenchResult, cfg: Config, tmp: Path) -> None:
    sizes = (2_000, 20_000) if cfg.quick else (100_000, 1_000_000, 10_000_000)
    path = tmp / "memory.db"
    builder = _TreeBuilder([encode_payload({"n": i}) for i in range(64)], grow=False)
    peaks: dict[str, list[tuple[str, float]]] = {"build": [], "verify": []}
    with closing(connect(path, write=True)):
        pass
    for size in sizes:
        progress(f"{NAME}: memory at {size:,} records")
        with closing(connect(path, write=True)) as conn:
            builder.extend(conn, size - builder.seq)
        for mode in ("build", "verify"):
            m = _measure("memory", str(path), mode)
            res.check(m["ok"] and m["size"] == size, f"{mode} at {size:,} records holds")
            peak = max(m["rss_peak_kib"], m["workers_peak_kib"]) / 1024
            peaks[mode].append((f"{size:,}", peak))
    what = {"build": "building the tree: peak RSS", "verify": "verify(): peak RSS of any process"}
    for mode, points in peaks.items():
        res.figures.append(flat_memory(what[mode], points))
        res.growth.append(Growth(what=what[mode], unit="MiB", points=points))
    if cfg.quick:
        res.figures.append(
            Figure(
                case="memory (building the tree, verify()) at 10,000,000 records",
                value=None,  # type: ignore[arg-type]  # not measured: the row says so
                unit="",
                target="n/a (quick)",
            )
        )


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    payloads = decision_payloads(300 if cfg.quick else 2_000)
    with tempfile.TemporaryDirectory(prefix="rensei-bench-tree-") as tmp_name:
        tmp = Path(tmp_name)
        _check_builder(res, tmp, payloads)
        _appends(res, cfg, tmp, payloads)
        path = _verify(res, cfg, tmp, [encode_payload(p) for p in payloads])
        _proofs(res, cfg, path)
        path.unlink()
        _memory(res, cfg, tmp)
    res.notes.append(
        "appends: baseline = the same AuditLog on a home whose tree storage was emptied after "
        "open (records appended alone); verify: baseline = the chain walk alone on the same "
        "log (chainwalk.verify_all tree=False)"
    )
    return res


def main(argv: list[str]) -> int:
    """``python -m benchmarks.bench_tree verify DB PUBLIC_KEY tree|chain all|N`` or
    ``memory DB build|verify``: one JSON object."""
    if len(argv) == 5 and argv[0] == "verify":
        out = _verify_side(Path(argv[1]), argv[2], argv[3], argv[4])
    elif len(argv) == 3 and argv[0] == "memory":
        out = _memory_side(Path(argv[1]), argv[2])
    else:
        print(main.__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
