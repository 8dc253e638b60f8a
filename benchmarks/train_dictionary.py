"""Train the audit log's zstd dictionary: ``python -m benchmarks.train_dictionary``.

Writes ``rensei_routing/store/data/audit-1.zdict``, shipped with the package and stored in
every home's database by schema migration 3 (``store/codec.py``). The sample is what
``--record`` stores: canonical decision payloads (the CLI's stamp included) from the workload
generator, both org shapes, contexts drawn with other seeds than the benchmarks use. A home
keeps the dictionary its records were written with, so training a new one (id 2, ...) never
makes an old record unreadable.
"""

from __future__ import annotations

from pathlib import Path

import zstandard

from rensei_routing import PolicySnapshot, explain_batch
from rensei_routing.core.audit.chain import encode_payload
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision

from .workload import build_contexts, policy_set

OUT = Path(__file__).resolve().parent.parent / "rensei_routing" / "store" / "data" / "audit-1.zdict"
DICT_ID = 1
DICT_SIZE = 48 * 1024


def main() -> None:
    samples: list[bytes] = []
    for shape, size in (("repo", 100), ("repo", 1_000), ("broad", 1_000)):
        chosen = policy_set(size, shape)
        snapshot = PolicySnapshot.of(chosen.policies, revision=1)
        for seed in (101, 102):
            for d in explain_batch(build_contexts(chosen, 1_500, seed=seed), snapshot):
                samples.append(encode_payload(StampedDecision(d, Freshness.live())))
    data = zstandard.train_dictionary(DICT_SIZE, samples, dict_id=DICT_ID, level=19)
    OUT.write_bytes(data.as_bytes())
    print(f"{OUT}: {len(data.as_bytes())} bytes from {len(samples)} samples")


if __name__ == "__main__":
    main()
