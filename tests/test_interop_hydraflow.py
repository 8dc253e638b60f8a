"""HydraFlow chains in and out (issue 20 §2): ``audit import --format hydraflow`` verifies by
HydraFlow's rule, refuses a broken chain or a fork writing nothing, is idempotent, keeps each
record's origin and time, redacts with our redactor; imported shadow decisions count in
``shadow report`` and ``policy whatif``; ``audit export --format hydraflow`` passes an
independent verifier (tests/hydraflow_ref.py, written from SEMANTICS.md only) and round-trips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home

from . import hydraflow_ref as ref
from .shadow_support import installed_seams

__all__ = ["installed_seams"]

SAMPLES = Path(__file__).resolve().parent.parent / "plugins" / "rensei-seams-hydraflow" / "samples"
SECRET = "sk-ant-api03-" + "A1b2C3d4" * 8
GH = "ghp_" + "Z9y8X7w6" * 5


def _ok(runner: CliRunner, *args: str) -> str:
    done = runner.invoke(cli, list(args))
    assert done.exit_code == 0, done.output
    return done.stdout


def _refused(runner: CliRunner, *args: str) -> str:
    done = runner.invoke(cli, list(args))
    assert done.exit_code == 1, done.output
    assert "Traceback" not in done.output
    lines = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def _records(home: Path) -> list[dict[str, Any]]:
    with AuditLog.open(Home(home)) as log:
        return [r.to_dict() for r in log.records()]


def _meta(home: Path) -> dict[str, str]:
    import apsw

    conn = apsw.Connection(str(Home(home).db_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    finally:
        conn.close()


def _plain_payloads(n: int) -> list[Any]:
    out: list[Any] = [
        {"kind": "note", "n": i, "text": f"record {i} \u00e9\u4e2d"} for i in range(n)
    ]
    out[1] = {"kind": "note", "text": f"hydraflow saw {GH}, missed {SECRET}"}
    out[2] = {"kind": "float", "x": 0.1, "y": 1e-7, "z": [1.5, -0.0]}
    return out


@pytest.fixture
def home(runner: CliRunner, tmp_path: Path) -> Path:
    _ok(runner, "init")
    return tmp_path / "home"


def test_a_chain_imports_with_origin_time_and_our_redaction(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    lines = ref.chain_lines(_plain_payloads(5))
    src = ref.write_chain(tmp_path / "shadow-decisions.jsonl", lines)
    assert ref.verify(lines) == (True, 5, None)
    out = _ok(runner, "audit", "import", str(src), "--format", "hydraflow", "--json")
    doc = json.loads(out)
    genesis = json.loads(lines[0])["record_hash"]
    assert doc == {
        "chain": genesis,
        "source_records": 5,
        "already_imported": 0,
        "imported": 5,
        "first_seq": 0,
        "head_hash": doc["head_hash"],
        "resumed": False,
    }
    records = _records(home)
    for seq, (ours, line) in enumerate(zip(records, lines, strict=True)):
        theirs = json.loads(line)
        origin = ours["payload"]["origin"]
        assert origin == {
            "chain": genesis,
            "file": str(src),
            "seq": seq,
            "record_hash": theirs["record_hash"],
            "payload_hash": theirs["payload_hash"],
            "recorded_at": theirs["recorded_at"],
            "schema_version": 1,
        }
        assert ours["recorded_at"] == theirs["recorded_at"].replace("+00:00", "Z")
        assert ours["payload"]["record_type"] == "hydraflow-import"
    stored = json.dumps(records[1]["payload"])
    assert "[REDACTED]" in stored  # HydraFlow's own marker, kept
    assert SECRET not in stored and "[REDACTED:" in stored  # what HydraFlow missed, ours caught
    assert GH not in stored
    assert records[2]["payload"]["payload"] == {
        "kind": "float",
        "x": 0.1,
        "y": 1e-7,
        "z": [1.5, -0.0],
    }
    _ok(runner, "audit", "verify")


@pytest.mark.parametrize(
    ("damage", "seq", "reason"),
    [
        (lambda ls: [*ls[:3], "{not json\n", *ls[3:]], 3, "unparseable-line"),
        (lambda ls: [*ls[:2], '{"seq": 2}\n', *ls[3:]], 2, "unparseable-line"),
        (lambda ls: ls[:2] + ls[3:], 2, "seq-gap"),
        (lambda ls: [ls[0].replace('"n":0', '"n":9'), *ls[1:]], 0, "payload-hash-mismatch"),
        (lambda ls: [*ls[:4], _relinked(ls[4])], 4, "prev-hash-mismatch"),
        (lambda ls: [*ls[:1], _rehashed(ls[1]), *ls[2:]], 1, "record-hash-mismatch"),
    ],
    ids=["garbage-line", "missing-fields", "gap", "edited-payload", "relinked", "rehashed"],
)
def test_a_broken_chain_is_refused_with_its_first_bad_seq_writing_nothing(
    runner: CliRunner, home: Path, tmp_path: Path, damage: Any, seq: int, reason: str
) -> None:
    _ok(
        runner, "audit", "import", str(_chain(tmp_path / "first.jsonl", 2)), "--format", "hydraflow"
    )
    before, meta = _records(home), _meta(home)
    lines = damage(ref.chain_lines(_plain_payloads(6)))
    assert ref.verify(lines)[2] == seq  # the reference agrees on the seq
    src = ref.write_chain(tmp_path / "broken.jsonl", lines)
    error = _refused(runner, "audit", "import", str(src), "--format", "hydraflow")
    assert f"seq {seq}: {reason}" in error
    assert (_records(home), _meta(home)) == (before, meta)


def _relinked(line: str) -> str:
    rec = json.loads(line)
    rec["prev_hash"] = "sha256:" + "1" * 64
    rec["record_hash"] = ref.sha(f"{rec['seq']}|{rec['prev_hash']}|{rec['payload_hash']}")
    return json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"


def _rehashed(line: str) -> str:
    rec = json.loads(line)
    rec["record_hash"] = "sha256:" + "2" * 64
    return json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"


def _chain(path: Path, n: int, payloads: list[Any] | None = None) -> Path:
    return ref.write_chain(path, ref.chain_lines((payloads or _plain_payloads(max(n, 3)))[:n]))


def test_import_is_idempotent_and_a_longer_chain_adds_only_what_is_new(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    payloads = _plain_payloads(8)
    short = _chain(tmp_path / "a.jsonl", 5, payloads)
    args = ("--format", "hydraflow", "--json")
    assert json.loads(_ok(runner, "audit", "import", str(short), *args))["imported"] == 5
    again = json.loads(_ok(runner, "audit", "import", str(short), *args))
    assert (again["imported"], again["already_imported"]) == (0, 5)
    prefix = json.loads(
        _ok(runner, "audit", "import", str(_chain(tmp_path / "p", 3, payloads)), *args)
    )
    assert (prefix["imported"], prefix["already_imported"]) == (0, 5)
    _ok(runner, "explain", "{}", "--record")  # one of our own records in between
    longer = json.loads(
        _ok(runner, "audit", "import", str(_chain(tmp_path / "b", 8, payloads)), *args)
    )
    assert (longer["imported"], longer["first_seq"], longer["already_imported"]) == (3, 6, 5)
    records = _records(home)
    assert [r["payload"].get("origin", {}).get("seq") for r in records] == [
        0,
        1,
        2,
        3,
        4,
        None,
        5,
        6,
        7,
    ]
    _ok(runner, "audit", "verify")


@pytest.mark.parametrize("length", [8, 4], ids=["longer-fork", "shorter-fork"])
def test_a_fork_of_an_imported_chain_is_refused_writing_nothing(
    runner: CliRunner, home: Path, tmp_path: Path, length: int
) -> None:
    payloads = _plain_payloads(8)
    _ok(
        runner, "audit", "import", str(_chain(tmp_path / "a", 6, payloads)), "--format", "hydraflow"
    )
    before, meta = _records(home), _meta(home)
    forked = [*payloads[:3], {"kind": "other"}, *payloads[4:]]  # same genesis, seq 3 differs
    error = _refused(
        runner,
        "audit",
        "import",
        str(_chain(tmp_path / "f", length, forked)),
        "--format",
        "hydraflow",
    )
    assert "fork" in error
    assert (_records(home), _meta(home)) == (before, meta)


def test_unstorable_records_are_refused_writing_nothing(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    lines = ref.chain_lines(_plain_payloads(3), stamps=["2026-01-01T00:00:00Z", "yesterday", "x"])
    error = _refused(
        runner,
        "audit",
        "import",
        str(ref.write_chain(tmp_path / "t", lines)),
        "--format",
        "hydraflow",
    )
    assert "seq 1: recorded_at 'yesterday'" in error
    assert _records(home) == []
    nan = ref.chain_lines([{"x": 1}, {"x": float("nan")}])
    error = _refused(
        runner,
        "audit",
        "import",
        str(ref.write_chain(tmp_path / "n", nan)),
        "--format",
        "hydraflow",
    )
    assert error.startswith("Error: seq 1:")
    assert _records(home) == [] and not any(k.startswith("hydraflow.") for k in _meta(home))


# -- shadow decisions, in and out ----------------------------------------------------------------


def _native_home(runner: CliRunner, tmp_path: Path, n: int) -> tuple[Path, list[dict[str, Any]]]:
    spawns = tmp_path / "spawns.jsonl"
    spawns.write_text(
        "".join((SAMPLES / "hydraflow-spawns.jsonl").read_text().splitlines(True)[:n])
    )
    home = tmp_path / "native"
    _ok(runner, "--home", str(home), "init")
    _ok(runner, "--home", str(home), "policy", "save", str(SAMPLES / "policies.json"))
    _ok(runner, "--home", str(home), "shadow", "record", str(spawns))
    return home, _records(home)


def _hydraflow_shape(payload: dict[str, Any]) -> dict[str, Any]:
    """A shadow record as HydraFlow's recorder writes it (document 001 §D6): the decision, the
    legacy route that ran, agreed, the divergence."""
    return {
        "decision": payload["proposed"],
        "legacy": payload["actual"],
        "agreed": payload["agreed"],
        "divergence": payload["divergence"],
        "seam": payload["seam"],
        "principal_id": payload["principal_id"],
    }


def _report(runner: CliRunner, home: Path, by: str) -> dict[str, Any]:
    doc = json.loads(_ok(runner, "--home", str(home), "shadow", "report", "--by", by, "--json"))
    return {"total": doc["total"], "groups": doc["groups"]}


@pytest.mark.usefixtures("installed_seams")
def test_imported_hydraflow_shadow_decisions_count_in_report_and_whatif(
    runner: CliRunner, home: Path, tmp_path: Path
) -> None:
    native, records = _native_home(runner, tmp_path, 300)
    shadow = [r for r in records if r["payload"].get("record_type") == "shadow-decision"]
    assert len(shadow) == len(records) - 1  # and the policy save's mutation record
    payloads = [_hydraflow_shape(r["payload"]) for r in shadow]
    src = ref.write_chain(tmp_path / "shadow-decisions.jsonl", ref.chain_lines(payloads))
    _ok(runner, "policy", "save", str(SAMPLES / "policies.json"))
    _ok(runner, "audit", "import", str(src), "--format", "hydraflow")
    for by in ("seam", "mechanism", "transport", "role"):
        assert _report(runner, home, by) == _report(runner, native, by)
    candidate = str(SAMPLES / "candidate-policies.json")
    ours = json.loads(_ok(runner, "policy", "whatif", candidate, "--json"))
    theirs = json.loads(_ok(runner, "--home", str(native), "policy", "whatif", candidate, "--json"))
    assert ours["contexts"] == theirs["contexts"] == 300
    assert ours["moved_provider"] > 0
    for key in ("moved_provider", "moved_model", "newly_held", "newly_rejected"):
        assert ours[key] == theirs[key], key


@pytest.mark.usefixtures("installed_seams")
def test_our_export_passes_hydraflows_verify_and_round_trips(
    runner: CliRunner, tmp_path: Path
) -> None:
    native, records = _native_home(runner, tmp_path, 200)
    out = tmp_path / "export.jsonl"
    _ok(runner, "--home", str(native), "audit", "export", "--format", "hydraflow", str(out))
    text = out.read_text(encoding="utf-8")
    assert text.isascii() and text.endswith("\n")
    lines = text.splitlines(True)
    assert ref.verify(lines) == (True, len(records), None)
    for ours, line in zip(records, lines, strict=True):
        rec = json.loads(line)
        assert line == json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n"
        assert rec["schema_version"] == 1
        assert rec["recorded_at"] == ours["recorded_at"]
        assert rec["payload"] == {
            "rensei": {"seq": ours["seq"], "record_hash": ours["record_hash"]},
            "value": ours["payload"],
        }
    # ... and imports back: the same payloads, the same times, the same report.
    other = tmp_path / "other"
    _ok(runner, "--home", str(other), "init")
    _ok(runner, "--home", str(other), "policy", "save", str(SAMPLES / "policies.json"))
    _ok(runner, "--home", str(other), "audit", "import", str(out), "--format", "hydraflow")
    back = _records(other)[1:]  # seq 0: that home's own policy save's mutation record
    assert [r["recorded_at"] for r in back] == [r["recorded_at"] for r in records]
    assert [r["payload"]["payload"]["value"] for r in back] == [r["payload"] for r in records]
    assert [r["payload"]["origin"]["record_hash"] for r in back] == [
        json.loads(x)["record_hash"] for x in lines
    ]
    assert _report(runner, other, "seam") == _report(runner, native, "seam")
    # the imported chain exports again, and that passes too
    again = tmp_path / "again.jsonl"
    _ok(runner, "--home", str(other), "audit", "export", "--format", "hydraflow", str(again))
    assert ref.verify(again.read_text().splitlines(True))[0]


@pytest.mark.parametrize(
    "payload",
    [
        {"a": 1, "b": [True, None, 'x\ny\t"q"\\'], "c": {"z": -5, "y": "\x7f/"}},
        {"k": "caf\u00e9 \u4e2d \U0001f600"},
        {"\u00e9": 1, "e": 2},
        {"f": 0.1, "g": 1e-7, "h": 1e21},
        {"big": 2**60, "small": 12345678901234567},
        {"s": "1234567890123456789"},
        {"ctl": "\x01\x1f"},
        ["not", "an", "object"],
        "text",
        {"secret": "password = 'hunter22'", "t": "token ghp_" + "a" * 36},
    ],
    ids=lambda p: json.dumps(p)[:24],
)
def test_the_stored_envelope_is_the_canonical_encoding_of_the_record(payload: Any) -> None:
    from rensei_routing.core.audit.chain import encode_payload
    from rensei_routing.core.audit.hydraflow import import_envelope, stored_envelope, walk
    from rensei_routing.core.redact import DEFAULT_REDACTOR
    from rensei_routing.errors import CanonicalEncodingError

    (record,) = walk(ref.chain_lines([payload], redact=lambda t: t))
    try:
        slow = encode_payload(import_envelope(record, chain="c", file="f"), DEFAULT_REDACTOR)
    except CanonicalEncodingError:
        with pytest.raises(CanonicalEncodingError):
            stored_envelope(record, chain="c", file="f", redactor=DEFAULT_REDACTOR)
        return
    assert stored_envelope(record, chain="c", file="f", redactor=DEFAULT_REDACTOR) == slow


@pytest.mark.parametrize(
    "payload",
    [
        {"a": 1, "b": [True, None, 'x\ny\t"q"\\'], "c": {"z": -5, "y": "\x7f/\x01"}},
        {"k": "caf\u00e9 \U0001f600"},
        {"f": 0.1, "g": 5e-7, "h": 1e21, "i": 1.5},
        {"f": 0.1},
        [1, 2, "three"],
        {"rensei": "a payload with our key", "value": 1},
    ],
    ids=lambda p: json.dumps(p)[:24],
)
def test_the_export_text_is_hydraflows_canonical_text(payload: Any) -> None:
    from rensei_routing.core.audit.chain import encode_payload
    from rensei_routing.core.audit.hydraflow import export_payload, export_text, hf_canonical

    mark = "sha256:" + "3" * 64
    stored = encode_payload(payload)
    value = json.loads(stored)
    text = export_text(stored, seq=7, record_hash=mark)
    assert text == hf_canonical(export_payload(value, seq=7, record_hash=mark))
    assert text == ref.canonical({"rensei": {"record_hash": mark, "seq": 7}, "value": value})
