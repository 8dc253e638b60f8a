"""The control side: the producer of ruleset snapshots. Org and policy writes, compile + sign
(``snapshots``) and the HTTP distribution endpoint (``server``).

Owns orchestration over the store and the signing adapter; holds no verification or caching
rule (``core.snapshot``, ``host``) and never imports the CLI.
"""

from .snapshots import (
    compile_snapshot,
    ensure_serve_token,
    is_stale,
    latest_snapshot,
    refresh_snapshot,
    serve_token_path,
    source_revisions,
    validator_results,
)

__all__ = [
    "compile_snapshot",
    "ensure_serve_token",
    "is_stale",
    "latest_snapshot",
    "refresh_snapshot",
    "serve_token_path",
    "source_revisions",
    "validator_results",
]
