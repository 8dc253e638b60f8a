"""Benchmark 4, policy-revisions: ``PolicyStore.save`` (validate + hash + write) and ``load``
(read + parse + re-hash) of 1k and 10k valid policies, beside RFC 8785 canonicalisation
(``canonical_bytes``) + SHA-256 of the same policy data.

``save`` is timed onto a store that already holds a revision (the steady state: it re-reads and
checks the current revision before writing the next) and, separately, as the very first save.
Target: ``load`` costs at most 2x the baseline.
"""

from __future__ import annotations

import hashlib
import statistics
import tempfile
from contextlib import closing
from pathlib import Path

from rensei_routing import canonical_bytes
from rensei_routing.store.db import connect
from rensei_routing.store.policies import PolicyStore

from .harness import BenchResult, Config, Figure, Growth, progress, timed
from .workload import policy_set

NAME = "policy-revisions"
TITLE = "PolicyStore save/load vs canonicalise + SHA-256"

TARGET_LOAD = 2.0
SAVED_AT = "2025-06-01T12:00:00.000000Z"


def run(cfg: Config) -> BenchResult:
    res = BenchResult(name=NAME, title=TITLE)
    sizes = (100, 1_000) if cfg.quick else (1_000, 10_000)
    costs: dict[str, list[tuple[str, float]]] = {"save": [], "load": [], "baseline": []}
    with tempfile.TemporaryDirectory(prefix="rensei-bench-policies-") as tmp:
        for size in sizes:
            repeats = 2 if cfg.quick else (5 if size <= 1_000 else 3)
            progress(f"{NAME}: {size:,} policies, {repeats} repeats")
            chosen = policy_set(size)
            documents = [pol.to_dict() for pol in chosen.policies]
            path = Path(tmp, f"policies-{size}.db")
            samples: dict[str, list[float]] = {"save": [], "load": [], "baseline": []}
            with closing(connect(path, write=True)) as conn, closing(connect(path)) as reader:
                store, loader = PolicyStore(conn), PolicyStore(reader)
                with timed() as t:
                    first = store.save(chosen.policies, saved_at=SAVED_AT)
                first_save = t[0]
                for _ in range(repeats):  # interleaved, so each ratio sees the same machine
                    with timed() as t:
                        store.save(chosen.policies, saved_at=SAVED_AT)
                    samples["save"].append(t[0])
                    with timed() as t:
                        loaded = loader.load()
                    samples["load"].append(t[0])
                    with timed() as t:
                        hashlib.sha256(canonical_bytes(documents)).hexdigest()
                    samples["baseline"].append(t[0])
                res.check(
                    loaded.state == "ok"
                    and loaded.snapshot.content_hash == first.content_hash
                    and len(loaded.snapshot.policies) == size
                    and loaded.snapshot.revision == repeats + 1,
                    f"{size:,} policies: load returns the saved set (state ok, same hash)",
                )
            save_s, load_s, base_s = (
                statistics.median(samples[k]) for k in ("save", "load", "baseline")
            )
            load_ratio = load_s / base_s
            res.figures.append(
                Figure(
                    case=f"load {size:,} policies",
                    value=load_s * 1e3,
                    unit="ms",
                    baseline=base_s * 1e3,
                    baseline_label="canonicalise + SHA-256",
                    ratio=load_ratio,
                    ratio_kind="time",
                    target=f"<= {TARGET_LOAD:.0f}x time",
                    passed=load_ratio <= TARGET_LOAD,
                )
            )
            res.figures.append(
                Figure(
                    case=f"save {size:,} policies (onto an existing revision)",
                    value=save_s * 1e3,
                    unit="ms",
                    baseline=base_s * 1e3,
                    baseline_label="canonicalise + SHA-256",
                    ratio=save_s / base_s,
                    ratio_kind="time",
                )
            )
            res.figures.append(
                Figure(
                    case=f"save {size:,} policies (first revision, info)",
                    value=first_save * 1e3,
                    unit="ms",
                    baseline=base_s * 1e3,
                    baseline_label="canonicalise + SHA-256",
                    ratio=first_save / base_s,
                    ratio_kind="time",
                )
            )
            costs["save"].append((f"{size:,}", save_s / size * 1e6))
            costs["load"].append((f"{size:,}", load_s / size * 1e6))
            costs["baseline"].append((f"{size:,}", base_s / size * 1e6))
            res.extra[str(size)] = {
                "save_s": save_s,
                "first_save_s": first_save,
                "load_s": load_s,
                "baseline_s": base_s,
                "stored_bytes": len(canonical_bytes(documents)),
            }
    for what, label in (("save", "save"), ("load", "load"), ("baseline", "canonicalise + hash")):
        res.growth.append(Growth(what=f"{label} time per policy", unit="us", points=costs[what]))
    res.notes.append(
        "times are medians of interleaved save/load/baseline rounds; a save onto an existing "
        "revision first re-reads that revision (parse + re-hash, as load does) to refuse "
        "writing over a corrupt store"
    )
    return res
