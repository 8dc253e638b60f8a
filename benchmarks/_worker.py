"""Subprocess side of chain-verify: time one pass over an audit database and report the peak
resident memory of the process during it.

On Linux the peak is ``VmHWM`` from ``/proc/self/status``, reset to the current size just before
the call by writing ``5`` to ``/proc/self/clear_refs``; ``ru_maxrss`` is not used there, because
a child started by fork + exec inherits its parent's high-water mark and would report the
benchmark runner's memory instead of its own. Elsewhere ``ru_maxrss`` is the fallback.

    python -m benchmarks._worker verify DB ORIGIN [WORKERS]   # AuditLog.verify(workers=...)
    python -m benchmarks._worker scan DB ORIGIN     # baseline: raw scan + decompress + SHA-256
    python -m benchmarks._worker validate N         # validate N globals that all conflict
    python -m benchmarks._worker replay HOME        # audit replay of the home's whole chain

Prints one JSON object on stdout.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import zstandard

from rensei_routing.core.audit.chain import ROW_COLUMNS
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.codec import ZSTD_MAGIC
from rensei_routing.store.db import connect

T = TypeVar("T")

_SELECT = f"SELECT {', '.join(ROW_COLUMNS)} FROM audit_records ORDER BY seq"


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class _Peak:
    """Peak resident memory of this process from :meth:`start` to :meth:`stop`, in KiB."""

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")  # reset VmHWM to the current resident size
            self.method = "VmHWM (reset before the call)"
        except OSError:
            self.method = "ru_maxrss"
        self.before = _status_kib("VmRSS") or self._maxrss()

    def stop(self) -> dict[str, Any]:
        peak = _status_kib("VmHWM") if self.method.startswith("VmHWM") else None
        return {
            "rss_before_kib": self.before,
            "rss_peak_kib": peak if peak is not None else self._maxrss(),
            "memory_method": self.method,
        }

    @staticmethod
    def _maxrss() -> int:
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def children_peak_kib() -> int:
    """The largest peak resident memory of a waited-for child (verify's worker processes)."""
    return int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def measured(call: Callable[[], T]) -> tuple[T, dict[str, Any]]:
    """``call()``'s result, and its wall time (``seconds``) with this process's peak memory
    during it (:class:`_Peak`)."""
    peak = _Peak()
    peak.start()
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    return out, {"seconds": seconds, **peak.stop()}


def _verify(path: Path, origin: str, workers: int | None = None) -> dict[str, Any]:
    with AuditLog(path, origin=origin) as log:
        log.head()  # open both connections outside the timed call (reads one row)
        result, memory = measured(lambda: log.verify(workers=workers))
    return {
        "records": result.records_checked,
        "ok": bool(result),
        "detail": result.reason,
        "workers_peak_kib": children_peak_kib(),
        **memory,
    }


def _scan(path: Path) -> dict[str, Any]:
    conn = connect(path)
    try:
        peak = _Peak()
        peak.start()
        start = time.perf_counter()
        records = 0
        ok = True
        sha256 = hashlib.sha256
        # zstd frames (schema 3) decompressed with the database's dictionaries, called directly
        decompress = {
            i: zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(body)).decompress
            for i, body in conn.execute("SELECT id, body FROM audit_dictionaries")
        }
        frame_dict = zstandard.get_frame_parameters
        magic = ZSTD_MAGIC
        with conn:  # one read snapshot, as verify() takes
            for _seq, _at, _prev, p_hash, _r_hash, payload in conn.execute(_SELECT):
                if payload[:4] == magic:
                    payload = decompress[frame_dict(payload).dict_id](payload)
                if "sha256:" + sha256(payload).hexdigest() != p_hash:
                    ok = False
                records += 1
        seconds = time.perf_counter() - start
        memory = peak.stop()
    finally:
        conn.close()
    return {"seconds": seconds, "records": records, "ok": ok, "detail": None, **memory}


def conflicting_globals(n: int) -> list[Any]:
    """``n`` enabled global rules at priority 0, each with its own action: every pair is an
    equal-precedence conflict (the worst case for validation)."""
    from rensei_routing import RoutingPolicy

    return [
        RoutingPolicy.from_dict({"id": f"p{i:06d}", "action": {"account_pool": [f"acct-{i}"]}})
        for i in range(n)
    ]


def _validate(n: int) -> dict[str, Any]:
    from rensei_routing.core.routing.validation import validate

    policies = conflicting_globals(n)
    report, memory = measured(lambda: validate(policies))
    return {
        "listed": len(report.issues),
        "omitted": report.omitted,
        "ok": not report and report.total == n * (n - 1) // 2,
        **memory,
    }


def _replay(home_path: Path) -> dict[str, Any]:
    """``audit replay`` of the home's whole chain (``replay_chain``, as the CLI calls it)."""
    from rensei_routing.ops.replay import Sources, replay_chain
    from rensei_routing.store.home import Home

    home = Home(home_path)
    with AuditLog.open(home) as log:
        log.head()  # open the connections outside the timed call
        summary, memory = measured(lambda: replay_chain(log, Sources(home)))
    return {
        "replayed": summary.replayed,
        "matched": summary.matched,
        "ok": bool(summary.ok),
        **memory,
    }


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "validate":
        print(json.dumps(_validate(int(argv[1]))))
        return 0
    if len(argv) == 2 and argv[0] == "replay":
        print(json.dumps(_replay(Path(argv[1]))))
        return 0
    if len(argv) not in (3, 4) or argv[0] not in ("verify", "scan"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, path, origin = argv[0], Path(argv[1]), argv[2]
    workers = int(argv[3]) if len(argv) == 4 else None
    out = _verify(path, origin, workers) if mode == "verify" else _scan(path)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
