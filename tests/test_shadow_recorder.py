"""Shadow recording at a spawn seam (rensei_routing/shadow/recorder.py) against a real home: the
switch
is an identity check, sink failures are swallowed and logged, programming errors propagate,
and the spawn's route is the same whatever the recorder does."""

from __future__ import annotations

import logging
import resource
import secrets
import signal
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest

from rensei_routing.core.audit.chain import GENESIS_HASH
from rensei_routing.core.shadow.compare import Seam, ShadowDecision, Stage
from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.errors import MalformedError, UnknownSeamError
from rensei_routing.plugins.manager import SeamRegistry, get_plugin_manager, seam_registry
from rensei_routing.shadow.recorder import (
    ShadowRecorder,
    record_route_shadow,
    set_shadow_enabled,
    shadow_enabled,
)
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .conftest import read_only_view
from .plugins.hydraflow_seams import SEAMS
from .shadow_support import home_with_policies, registry, spawn

STAMP = "2026-02-03T04:05:06.000007Z"


def _count(home: Home) -> int:
    with AuditLog.open(home) as log:
        return log.count()


def _recorder(home: Home, reg: SeamRegistry | None = None) -> ShadowRecorder:
    return ShadowRecorder(home, reg or registry(), clock=lambda: STAMP)


# -- the switch ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "switch",
    [False, None, 1, "true", "True", MagicMock(), [True]],
    ids=["false", "none", "one", "str-true", "str-True", "mock", "list"],
)
def test_only_true_itself_enables_recording(tmp_path: Path, switch: object) -> None:
    home = home_with_policies(tmp_path)
    with _recorder(home) as rec:
        assert record_route_shadow(Spawn.from_dict(spawn()), enabled=switch, recorder=rec) is None
        assert _count(home) == 0
        record = record_route_shadow(Spawn.from_dict(spawn()), enabled=True, recorder=rec)
    assert isinstance(record, ShadowDecision)
    assert _count(home) == 1


def test_the_home_switch_defaults_on_and_is_kept(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    assert shadow_enabled(home) is True
    set_shadow_enabled(home, False)
    assert shadow_enabled(home) is False
    set_shadow_enabled(home, True)
    assert shadow_enabled(home) is True


def test_a_hand_edited_switch_is_a_typed_error(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute("INSERT INTO meta(key, value) VALUES ('setting.shadow_enabled', 'yes')")
    with pytest.raises(MalformedError, match="shadow_enabled"):
        shadow_enabled(home)


# -- what is recorded ---------------------------------------------------------------------------


def test_one_call_is_one_durable_redacted_record(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    token = "ghp_" + "a" * 36
    with _recorder(home) as rec:
        record = rec.record(Spawn.from_dict(spawn(principal_id=f"bot {token}")))
    with AuditLog.open(home) as log:
        (stored,) = log.tail(5)
        assert log.verify()
    assert stored.seq == 0 and stored.prev_hash == GENESIS_HASH
    assert stored.recorded_at == STAMP == record.recorded_at
    assert token not in stored.payload_bytes.decode()
    assert "[REDACTED:github-token]" in stored.payload_bytes.decode()
    back = ShadowDecision.from_dict(stored.payload)
    assert back.proposed.policy_id == "client-on-anthropic" and back.agreed


def test_a_batch_is_one_transaction_in_order(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    spawns = [Spawn.from_dict(spawn(principal_id=f"p{i}")) for i in range(5)]
    with _recorder(home) as rec:
        rec.record(spawns[0])
        records, result = rec.record_many(spawns)
    assert (result.first_seq, result.count) == (1, 5)
    with AuditLog.open(home) as log:
        stored = log.tail(5)
    assert [ShadowDecision.from_dict(r.payload).principal_id for r in stored] == [
        f"p{i}" for i in range(5)
    ]
    assert [r.principal_id for r in records] == [f"p{i}" for i in range(5)]


def test_a_new_revision_is_picked_up_between_calls(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    with _recorder(home) as rec:
        first = rec.record(Spawn.from_dict(spawn()))
        with closing(home.connect(write=True)) as conn:
            PolicyStore(conn).save((), saved_at=STAMP)  # revision 2: no policies
        second = rec.record(Spawn.from_dict(spawn()))
    assert (first.proposed.policy_revision, first.proposed.reason) == (1, "matched-policy")
    assert (second.proposed.policy_revision, second.proposed.reason) == (2, "no-policy-applies")


def test_a_home_without_policies_records_against_the_absent_snapshot(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.init()
    with _recorder(home) as rec:
        record = rec.record(Spawn.from_dict(spawn()))
    assert record.proposed.snapshot_state == "absent"
    assert record.proposed.policy_source == "legacy-compatibility" and record.agreed


def _broken_classifier(stages: Sequence[Stage]) -> Stage:
    raise KeyError("no such dial")


def _inventive_classifier(stages: Sequence[Stage]) -> Stage:
    return Stage(mechanism="vibes", provider="zai", detail="   ")


@pytest.mark.parametrize(
    ("classifier", "says"),
    [(_broken_classifier, "KeyError"), (_inventive_classifier, "named 'vibes'")],
    ids=["raises", "foreign-stage"],
)
def test_a_misbehaving_classifier_records_the_spawn_as_unclassified(
    tmp_path: Path, classifier: Any, says: str
) -> None:
    from rensei_routing.plugins.hookspecs import hookimpl

    class Broken:
        @staticmethod
        @hookimpl
        def register_seams(register: Any) -> None:
            register(
                Seam(
                    name="broken-seam",
                    request_face="agentic",
                    stages=("default",),
                    classifier=classifier,
                )
            )

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Broken(), name="broken-plugin")
    reg = seam_registry(pm)
    home = home_with_policies(tmp_path)
    with _recorder(home, reg) as rec:
        record = rec.record(Spawn.from_dict(spawn(seam="broken-seam")))
    assert record.actual.mechanism == "unclassified"
    assert record.actual.mechanism_detail is not None
    assert says in record.actual.mechanism_detail
    assert "'broken-plugin'" in record.actual.mechanism_detail
    with AuditLog.open(home) as log:
        assert ShadowDecision.from_dict(log.get(0).payload) == record


# -- sink failures and programming errors -------------------------------------------------------


@contextmanager
def _disk_full(home: Home) -> Iterator[None]:
    """Every file may grow no further than it is now (RLIMIT_FSIZE): writes fail with EFBIG."""
    sizes = [p.stat().st_size for p in home.path.iterdir() if p.is_file()]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (max(sizes), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def test_a_full_disk_is_logged_and_returns_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = home_with_policies(tmp_path)
    with _recorder(home) as rec:
        rec.record(Spawn.from_dict(spawn()))  # open everything first
        with _disk_full(home), caplog.at_level(logging.WARNING, "rensei_routing.shadow"):
            many = [  # random ids: stored compressed, the record still outgrows every file
                {"account_id": f"{i:03d}" + secrets.token_hex(120), "provider_binding": "anthropic"}
                for i in range(1_500)
            ]  # a record larger than every file of the home is now
            got = record_route_shadow(
                Spawn.from_dict(spawn(accounts=many)), enabled=True, recorder=rec
            )
    assert got is None
    assert "not written" in caplog.text, caplog.text
    assert _count(home) == 1
    with AuditLog.open(home) as log:
        assert log.verify()


def test_a_missing_home_is_logged_and_returns_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        _recorder(Home(tmp_path / "nowhere")) as rec,
        caplog.at_level(logging.WARNING, "rensei_routing.shadow"),
    ):
        assert record_route_shadow(Spawn.from_dict(spawn()), enabled=True, recorder=rec) is None
    assert "run `rensei init`" in caplog.text
    assert not (tmp_path / "nowhere").exists()


def test_a_read_only_home_is_logged_and_returns_none(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    with read_only_view(home.path) as view, _recorder(Home(view)) as rec:
        assert record_route_shadow(Spawn.from_dict(spawn()), enabled=True, recorder=rec) is None
    assert _count(home) == 0


def test_programming_errors_propagate(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)

    def bad_clock() -> str:
        raise TypeError("clock bug")

    with (
        ShadowRecorder(home, registry(), clock=bad_clock) as rec,
        pytest.raises(TypeError, match="clock bug"),
    ):
        record_route_shadow(Spawn.from_dict(spawn()), enabled=True, recorder=rec)
    with _recorder(home) as rec:
        with pytest.raises(UnknownSeamError):
            record_route_shadow(Spawn.from_dict(spawn(seam="nope")), enabled=True, recorder=rec)
        with pytest.raises(AttributeError):
            record_route_shadow({"seam": "agentic-runner"}, enabled=True, recorder=rec)  # type: ignore[arg-type]
    assert _count(home) == 0


# -- inertness ----------------------------------------------------------------------------------


def _spawn_site(seam: Seam, doc: dict[str, Any], shadow: Any) -> tuple[str, str | None, str | None]:
    """A spawn seam as HydraFlow wires it: apply the legacy stages, offer the spawn to the
    shadow hook (ignoring its answer, as the wiring must), then spawn on the route the stages
    chose; returns that route."""
    spawn_value = Spawn.from_dict(doc)
    route = (spawn_value.provider, spawn_value.model)
    shadow(spawn_value)
    return route[0], route[1], spawn_value.account_id


@pytest.mark.parametrize("seam", SEAMS, ids=[s.name for s in SEAMS])
def test_the_route_is_the_same_with_shadowing_on_off_and_failing(
    tmp_path: Path, seam: Seam
) -> None:
    good = home_with_policies(tmp_path / "good")
    first = "maintenance-default" if seam.request_face == "one-shot" else "default"
    doc = spawn(
        seam=seam.name,
        stages=[
            {"mechanism": first, "provider": "claude"},
            {"mechanism": "credit-failover", "provider": "zai"},
        ],
        model="glm-5.3",
        account_id="zai-main",
    )
    frozen = Spawn.from_dict(doc)
    results = {}
    with _recorder(good) as on, _recorder(Home(tmp_path / "missing")) as failing:
        modes = {
            "on": lambda s: record_route_shadow(s, enabled=True, recorder=on),
            "off": lambda s: record_route_shadow(s, enabled=False, recorder=on),
            "failing": lambda s: record_route_shadow(s, enabled=True, recorder=failing),
            "absent": lambda s: None,  # no shadow hook at all
        }
        for name, hook in modes.items():
            seen: list[Spawn] = []
            answers: list[Any] = []

            def watch(
                s: Spawn, hook: Any = hook, seen: list[Spawn] = seen, answers: list[Any] = answers
            ) -> Any:
                seen.append(s)
                answers.append(hook(s))
                return answers[-1]

            results[name] = _spawn_site(seam, doc, watch)
            assert seen == [frozen]  # the hook saw the spawn and could not change it
            assert len(answers) == 1
            expected_type = ShadowDecision if name == "on" else type(None)
            assert type(answers[0]) is expected_type, name
    assert set(results.values()) == {("zai", "glm-5.3", "zai-main")}
    with AuditLog.open(good) as log:
        (stored,) = log.tail(5)
    recorded = ShadowDecision.from_dict(stored.payload)
    assert recorded.actual.mechanism == "credit-failover"
    assert recorded.seam == seam.name


def test_a_corrupt_revision_is_recorded_as_held_not_skipped(tmp_path: Path) -> None:
    home = home_with_policies(tmp_path)
    with closing(home.connect(write=True)) as conn, conn:
        conn.execute("UPDATE policy_revisions SET body = CAST('[]' AS BLOB) WHERE revision = 1")
    with _recorder(home) as rec:
        record = record_route_shadow(Spawn.from_dict(spawn()), enabled=True, recorder=rec)
    assert record is not None
    assert (record.proposed.snapshot_state, record.proposed.reason) == (
        "corrupt",
        "snapshot-unavailable",
    )
    assert record.divergence == "not-selected" and not record.agreed
    assert _count(home) == 1


# -- what is stored: redaction and the decision id -------------------------------------------


def test_stored_records_equal_the_general_encoder_and_ids_recompute(tmp_path: Path) -> None:
    """A batch stores clean records as their canonical bytes and redacts the others exactly as
    ``encode_payload`` does, with the log's own redactor (here: the defaults plus a plugin's
    pattern); every stored decision id recomputes from the stored record."""
    import re

    from rensei_routing.core.audit.chain import encode_payload
    from rensei_routing.core.redact import DEFAULT_PATTERNS, RedactionPattern, Redactor
    from rensei_routing.core.routing.ids import record_decision_id

    acme = RedactionPattern(
        label="acme-ticket", regex=re.compile(r"acmetkt-[0-9a-f]{8}"), triggers=("acmetkt-",)
    )
    redactor = Redactor((*DEFAULT_PATTERNS, acme))
    home = home_with_policies(tmp_path)
    spawns = [
        Spawn.from_dict(spawn()),
        Spawn.from_dict(spawn(principal_id="implementer acmetkt-0123abcd")),  # plugin pattern
        Spawn.from_dict(spawn(principal_id="ghp_" + "a" * 36)),  # a built-in pattern
        Spawn.from_dict(spawn(repo="acme/other")),
    ]
    with ShadowRecorder(home, registry(), clock=lambda: STAMP, redactor=redactor) as rec:
        records, result = rec.record_many(spawns)
    with AuditLog.open(home) as log:
        stored = [log.get(seq) for seq in result.seqs]
    for record, row in zip(records, stored, strict=True):
        assert row.payload_bytes == encode_payload(record, redactor)
        proposed = row.payload["proposed"]
        assert proposed["decision_id"] == record_decision_id(proposed, redactor=redactor)
    assert b"acmetkt-0123abcd" not in b"".join(r.payload_bytes for r in stored)
    assert b"ghp_" + b"a" * 36 not in b"".join(r.payload_bytes for r in stored)
    assert stored[0].payload_bytes == records[0].canonical()  # nothing to redact: as is
