"""An independent HydraFlow reference, written from SEMANTICS.md ("Reference wire formats")
alone: it imports nothing of rensei_routing, so a mistake in our interop code cannot hide in a
shared helper. It writes HydraFlow audit chains and policy stores the way HydraFlow does and
verifies a chain the way ``RoutingAuditLog.verify()`` does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

GENESIS = "sha256:" + "0" * 64


def canonical(value: Any) -> str:
    """HydraFlow's canonical JSON: sorted keys, compact, ASCII escapes, non-JSON as str()."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


#: A stand-in for HydraFlow's redactor: it knows GitHub tokens only (ours knows more).
_GH = re.compile(r"ghp_[A-Za-z0-9]{20,}")


def hydraflow_redact(text: str) -> str:
    return _GH.sub("[REDACTED]", text)


def chain_lines(
    payloads: Iterable[Any],
    stamps: Sequence[str] | None = None,
    *,
    redact: Callable[[str], str] = hydraflow_redact,
) -> list[str]:
    """The lines HydraFlow's append writes for ``payloads`` (each newline-terminated)."""
    lines, prev = [], GENESIS
    for seq, payload in enumerate(payloads):
        text = redact(canonical(payload))
        p_hash = sha(text)
        r_hash = sha(f"{seq}|{prev}|{p_hash}")
        stamp = (
            stamps[seq] if stamps else f"2026-08-22T10:{seq // 60 % 60:02d}:{seq % 60:02d}+00:00"
        )
        record = {
            "payload": json.loads(text),
            "payload_hash": p_hash,
            "prev_hash": prev,
            "record_hash": r_hash,
            "recorded_at": stamp,
            "schema_version": 1,
            "seq": seq,
        }
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
        prev = r_hash
    return lines


def write_chain(path: Path, lines: Iterable[str]) -> Path:
    path.write_text("".join(lines), encoding="utf-8")
    return path


def verify(lines: Iterable[str]) -> tuple[bool, int, int | None]:
    """``(ok, records verified, first bad seq)`` by HydraFlow's rule."""
    prev, count = GENESIS, 0
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            seq, payload = rec["seq"], rec["payload"]
            p_hash, prev_hash, r_hash = rec["payload_hash"], rec["prev_hash"], rec["record_hash"]
        except (ValueError, KeyError, TypeError):
            return False, count, count
        if (
            seq != count
            or prev_hash != prev
            or sha(canonical(payload)) != p_hash
            or sha(f"{seq}|{prev_hash}|{p_hash}") != r_hash
        ):
            return False, count, count
        prev, count = r_hash, count + 1
    return True, count, None


def policy_store(policies: list[dict[str, Any]], revision: int = 7) -> str:
    """HydraFlow's ``policies.json`` text for policy objects (indent 2, keys sorted)."""
    texts = sorted(json.dumps(p, sort_keys=True, separators=(",", ":")) for p in policies)
    doc = {
        "content_hash": sha("\n".join(texts)),
        "policies": policies,
        "revision": revision,
        "schema_version": 1,
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
