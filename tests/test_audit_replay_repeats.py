"""``audit replay`` counts a payload it has seen before as it counted it the first time, without
reading it again: the summary (counts, first mismatch and first unreplayable seq by reason)
must be exactly the one a replay that reads every record gives (``repeats=False``), for logs
mixing matches, mismatches, redacted inputs, unreadable contexts, missing revisions and
snapshots, shadow records, claims and records that carry no decision, each repeated in any
order, and with caches small enough to drop entries mid-replay."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rensei_routing.cli import cli
from rensei_routing.core._parse import STRICT_DECODER
from rensei_routing.ops import replay as replay_module
from rensei_routing.ops.replay import Sources, replay_chain
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
MARKER = "[REDACTED:github-token]"
STAMP = "2026-08-22T10:00:00.000000Z"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    """A home holding one policy revision and the decisions recorded for the example contexts
    (its log is emptied: each example appends its own)."""
    path = tmp_path_factory.mktemp("replay-repeats") / "h"
    runner = CliRunner()
    for args in (
        ["init", "--org", "acme"],
        ["policy", "save", str(EXAMPLES / "policies.json")],
        ["explain-batch", "--record", str(EXAMPLES / "contexts.jsonl")],
    ):
        result = runner.invoke(cli, ["--no-plugins", "--home", str(path), *args])
        assert result.exit_code == 0, result.output
    with AuditLog.open(Home(path)) as log:
        payloads = [r.payload for r in log.records()]
    decisions = [p for p in payloads if isinstance(p, dict) and "decision_id" in p]
    assert len(decisions) >= 5
    return path, decisions


def _edit(decision: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    edited = copy.deepcopy(decision)
    change(edited)
    return edited


def _lie(d: dict[str, Any]) -> None:
    d["account_id"] = "zai-main"


def _other_id(d: dict[str, Any]) -> None:
    d["decision_id"] = "sha256:" + "0" * 64


def _redact_role(d: dict[str, Any]) -> None:
    d["explanation"]["context"]["role"] = MARKER


def _redact_detail(d: dict[str, Any]) -> None:
    context = d["explanation"]["context"]
    context["legacy_route"] = {**(context.get("legacy_route") or {}), "mechanism_detail": MARKER}


def _unreadable_context(d: dict[str, Any]) -> None:
    d["explanation"]["context"]["accounts"] = 5


def _never_held(d: dict[str, Any]) -> None:
    d["policy_revision"] = 99


def _no_revision(d: dict[str, Any]) -> None:
    del d["policy_revision"]


def _stamped(d: dict[str, Any]) -> None:
    d["rulesetRev"] = "acme@7"


_CHANGES: tuple[Callable[[dict[str, Any]], None], ...] = (
    _lie,
    _other_id,
    _redact_role,
    _redact_detail,
    _unreadable_context,
    _never_held,
    _no_revision,
    _stamped,
)


def _variants(decisions: list[Any]) -> list[Any]:
    """Payloads of every kind replay tells apart, from the recorded decisions."""
    out: list[Any] = list(decisions)
    for decision in decisions[:3]:
        out.extend(_edit(decision, change) for change in _CHANGES)
        out.append(
            {
                "actual": {"outcome": "selected"},
                "proposed": decision,
                "record_type": "shadow-decision",
            }
        )
        out.append(
            {
                "actual": {"outcome": "selected"},
                "proposed": _edit(decision, _lie),
                "record_type": "shadow-decision",
            }
        )
    out.append(
        {
            "authorization": {
                "authorizers": [{"allowed": True, "name": "grant-check", "reason": "ok"}]
            },
            "pool_id": "pool-a",
            "project": None,
            "record_type": "claim-decision",
            "rulesetRev": "acme@3",
        }
    )
    out.append({"record_type": "note", "text": "carries no decision"})
    return out


def _fresh(template: Path, into: Path) -> Home:
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(template, into)
    home = Home(into)
    with AuditLog.open(home) as log:
        assert log.count() > 0
    return home


def _summaries(home: Home, since: int, cache: int, cache_bytes: int = 2**26) -> Iterator[Any]:
    with (
        AuditLog.open(home) as log,
        mock.patch.object(replay_module, "CACHE_SIZE", cache),
        mock.patch.object(replay_module, "CACHE_BYTES", cache_bytes),
    ):
        for repeats in (True, False):
            yield replay_chain(log, Sources(home), since=since, repeats=repeats)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=40),
    since=st.integers(min_value=0, max_value=5),
    cache=st.sampled_from([1, 2, 3, 20_000]),
    cache_bytes=st.sampled_from([0, 1_500, 4_000, 2**26]),
)
def test_a_replay_that_counts_repeats_unread_gives_the_plain_replays_summary(
    template: tuple[Path, list[Any]],
    tmp_path: Path,
    picks: list[int],
    since: int,
    cache: int,
    cache_bytes: int,
) -> None:
    path, decisions = template
    variants = _variants(decisions)
    home = _fresh(path, tmp_path / "h")
    with AuditLog.open(home) as log:
        first = log.head()[0]
        log.append_many([variants[i % len(variants)] for i in picks], recorded_at=STAMP)
    fast, plain = _summaries(home, first + since, cache, cache_bytes)
    assert fast == plain
    assert fast.replayed + fast.unreplayable_count + fast.skipped == max(0, len(picks) - since)


def test_every_kind_of_record_is_told_apart_when_it_repeats(
    template: tuple[Path, list[Any]], tmp_path: Path
) -> None:
    """Each variant twice, the second time out of order: both replays name the same first
    mismatch and the same first record of each unreplayable reason, and count both copies."""
    path, decisions = template
    variants = _variants(decisions)
    home = _fresh(path, tmp_path / "h")
    with AuditLog.open(home) as log:
        first = log.head()[0]
        log.append_many([*variants, *reversed(variants)], recorded_at=STAMP)
    fast, plain = _summaries(home, first, 20_000)
    assert fast == plain
    assert fast.mismatched > 0 and fast.matched > 0 and fast.skipped == 2
    assert {
        "redacted input",
        "unreadable context",
        "no policy revision",
        "snapshot acme@7 absent",
        "snapshot acme@3 absent",
    } <= set(fast.unreplayable)
    assert all(count % 2 == 0 for count in fast.unreplayable.values())
    assert fast.by_kind.get("shadow", 0) > 0


def _plain_loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return replay_module._ABSENT


def _strict_loads(text: str) -> Any:
    try:
        return STRICT_DECODER.decode(text)
    except (ValueError, RecursionError):
        return None


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


def _texts_of(value: Any) -> list[str]:
    """The ways a writer (or a forger) may spell ``value``."""
    out = [
        orjson.dumps(value).decode("utf-8") if _orjson_writes(value) else "null",
        json.dumps(value, separators=(",", ":"), ensure_ascii=False),
        json.dumps(value),
        json.dumps(value, sort_keys=True, separators=(",", ":")),
    ]
    compact = out[1]
    if compact.startswith("{") and len(compact) > 2:
        out.append(compact[:-1] + "," + compact[1:])  # every key twice
    return out


def _orjson_writes(value: Any) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(
    value=_JSON,
    extra=st.sampled_from(
        ["", " ", "NaN", '{"a":NaN}', '{"a":1,"a":2}', "[1]]", '"\\ud800"', "1" * 30]
    ),
)
def test_the_quick_read_is_the_plain_and_the_strict_read(value: Any, extra: str) -> None:
    """``_loads`` reads any text to ``json.loads``'s value, and the stored context's reader to the
    strict decoder's, whether orjson's round trip proves the text or not."""
    for text in [*_texts_of(value), extra, _texts_of(value)[1] + extra]:
        assert _same(replay_module._loads(text), _plain_loads(text))
        assert _same(replay_module._context_doc({}, text), _strict_loads(text))


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types (``NaN`` equal to itself, ``1`` not to ``1.0``)."""
    return a is b or repr(a) == repr(b)
