"""``rensei explain-batch``'s output path: the spooled lines are exactly the printable JSON of
each decision (whatever the strings hold, whichever segment they land in), and stdout gets the
same bytes whether the spool reaches it in the kernel (``sendfile``) or through a buffer (a
pipe, an ``O_APPEND`` file, a stream held in memory)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rensei_routing.cli._batch as batch
from rensei_routing.cli._inputs import read_policy_file
from rensei_routing.cli._output import emit_file, printable_json
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.jsonl import decision_line
from rensei_routing.core.routing.resolver import explain_batch
from rensei_routing.core.snapshot.freshness import Freshness, StampedDecision
from rensei_routing.store.audit import AuditLog
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .strategies import context_dicts

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
POLICIES = EXAMPLES / "policies.json"
_CLI = "import sys; from rensei_routing.cli import cli; cli(prog_name='rensei')"

#: Characters a terminal would obey or that the printable check must look at: C0 controls,
#: DEL, C1 controls, separators, a bidirectional override, a tag character beyond the BMP.
_NASTY = "\x00\x07\x1b\x7f\x85\x9b\u2028\u2029\u202e\U000e0001\n\r\t"
_TEXT = st.text(
    alphabet=st.sampled_from(_NASTY) | st.characters(codec="utf-8"), min_size=1, max_size=12
).filter(lambda s: s.strip())


@st.composite
def hostile_context_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """A valid context whose free-text fields may hold any character."""
    doc = draw(context_dicts())
    if draw(st.booleans()):
        doc["principal_id"] = draw(_TEXT)
    if draw(st.booleans()):
        doc["legacy_route"] = {"provider_binding": draw(_TEXT), "model": draw(_TEXT)}
    if draw(st.booleans()):
        doc["accounts"] = [{"account_id": draw(_TEXT), "provider_binding": "anthropic"}]
    return doc


def _want(decisions: list[Any], stamp: Freshness) -> bytes:
    return "".join(
        printable_json(
            json.dumps(
                StampedDecision(d, stamp).to_dict(), ensure_ascii=False, separators=(",", ":")
            )
        )
        + "\n"
        for d in decisions
    ).encode("utf-8")


class _Stdout:
    """A stand-in for ``sys.stdout`` over a binary stream."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer

    def flush(self) -> None:
        self.buffer.flush()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(hostile_context_dicts(), min_size=1, max_size=40), min_size=1, max_size=4),
    st.sampled_from([1, 300, 1 << 20]),
    st.booleans(),
)
def test_the_spool_publishes_the_printable_json_of_every_decision(
    chunks: list[list[dict[str, Any]]], segment: int, real_file: bool
) -> None:
    snapshot = read_policy_file(POLICIES)
    stamp = Freshness.live()
    decided = [
        explain_batch([RouteContext.from_dict(c) for c in chunk], snapshot) for chunk in chunks
    ]
    # a real file takes the sendfile path, a BytesIO the buffered one
    sink: Any = tempfile.TemporaryFile() if real_file else io.BytesIO()  # noqa: SIM115
    saved = sys.stdout
    sys.stdout = _Stdout(sink)
    try:
        with batch._OutputSpool(segment) as spool:
            for decisions in decided:
                spool.write_lines([decision_line(d, stamp) for d in decisions])
            spool.publish()
    finally:
        sys.stdout = saved
    sink.seek(0)
    got = sink.read()
    sink.close()
    assert got == _want([d for decisions in decided for d in decisions], stamp)
    text = got.decode("utf-8")
    assert all(c.isprintable() or c == "\n" for c in text)


def test_a_decision_line_holds_no_control_below_space() -> None:
    """What the spool's quick printable check relies on."""
    snapshot = read_policy_file(POLICIES)
    doc = {"principal_id": "a\x00\x1f\n\t\rb", "legacy_route": {"provider_binding": "\x1b[31m"}}
    (decision,) = explain_batch([RouteContext.from_dict(doc)], snapshot)
    line = decision_line(decision, Freshness.live())
    assert not any(ord(c) < 0x20 for c in line)
    assert json.loads(line)["explanation"]["context"]["principal_id"] == "a\x00\x1f\n\t\rb"


def test_emit_file_copies_the_rest_of_the_file_through_either_path(tmp_path: Path) -> None:
    data = bytes(range(256)) * 5000
    for real in (True, False):
        src = tmp_path / "src"
        src.write_bytes(data)
        sink: Any = open(tmp_path / "sink", "w+b") if real else io.BytesIO()  # noqa: SIM115
        saved = sys.stdout
        sys.stdout = _Stdout(sink)
        try:
            with open(src, "rb") as f:
                f.seek(1000)
                emit_file(f)
                assert f.tell() == len(data)  # left where a plain copy leaves it
        finally:
            sys.stdout = saved
        sink.seek(0)
        assert sink.read() == data[1000:]
        sink.close()


def _batch_input(tmp_path: Path) -> tuple[Path, bytes]:
    base = (EXAMPLES / "contexts.jsonl").read_text(encoding="utf-8").splitlines()
    lines = [base[i % len(base)] for i in range(batch.CHUNK + 50)]
    lines[3] = json.dumps({"principal_id": "ascii-but-del\x7f", "repo": "acme/widgets"})
    lines[4] = json.dumps({"principal_id": "sep\u2028", "repo": "acme/widgets"}, ensure_ascii=False)
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    snapshot = read_policy_file(POLICIES)
    decisions = explain_batch([RouteContext.from_dict(json.loads(x)) for x in lines], snapshot)
    return path, _want(decisions, Freshness.live())


def _run(args: list[str], stdout: Any) -> None:
    env = {**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""}
    done = subprocess.run(
        [sys.executable, "-c", _CLI, *args], stdout=stdout, stderr=subprocess.PIPE, env=env
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("target", ["file", "append", "pipe"])
def test_explain_batch_prints_the_same_bytes_to_any_stdout(tmp_path: Path, target: str) -> None:
    path, want = _batch_input(tmp_path)
    args = ["explain-batch", str(path), "--policies", str(POLICIES)]
    if target == "pipe":
        env = {**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""}
        done = subprocess.run(
            [sys.executable, "-c", _CLI, *args], capture_output=True, env=env, check=True
        )
        assert done.stdout == want
        return
    out = tmp_path / "out"
    out.write_bytes(b"before\n")
    with open(out, "ab" if target == "append" else "wb") as f:  # O_APPEND: no sendfile
        _run(args, f)
    assert out.read_bytes() == (b"before\n" if target == "append" else b"") + want


def test_only_the_last_spool_file_keeps_a_write_buffer(tmp_path: Path) -> None:
    """A batch of any size holds one spool buffer, not one per file (memory stays flat)."""
    lines = [f'{{"n":{i}}}' for i in range(100)]
    sink = open(tmp_path / "out", "w+b")  # noqa: SIM115
    saved = sys.stdout
    sys.stdout = _Stdout(sink)
    try:
        with batch._OutputSpool(segment=1) as spool:
            for start in range(0, 100, 10):
                spool.write_lines(lines[start : start + 10])
            files = list(spool._files)
            assert len(files) == 10
            assert not any(isinstance(f, io.BufferedIOBase) for f in files[:-1])
            assert isinstance(files[-1], io.BufferedIOBase)
            spool.publish()
            assert all(f.closed for f in files)
    finally:
        sys.stdout = saved
    sink.seek(0)
    assert sink.read() == "".join(line + "\n" for line in lines).encode()
    sink.close()


def test_a_bad_line_among_quick_lines_prints_and_records_nothing(tmp_path: Path) -> None:
    """Lines in the form to_dict writes take the line reader; a duplicate key deep in one of
    them, chunks in, still stops the batch before anything is printed or recorded."""
    base = (EXAMPLES / "contexts.jsonl").read_text(encoding="utf-8").splitlines()
    quick = [
        json.dumps(RouteContext.from_dict(json.loads(x)).to_dict(), separators=(",", ":"))
        for x in base
    ]
    lines = [quick[i % len(quick)] for i in range(2 * batch.CHUNK + 10)]
    bad = 2 * batch.CHUNK + 3
    lines[bad] = lines[bad].replace('{"account_id":', '{"account_id":"x","account_id":', 1)
    path = tmp_path / "b.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    home = tmp_path / "h"
    env = {**os.environ, "RENSEI_ROUTING_LOAD_PLUGINS": ""}
    for args in (["init"], ["policy", "save", str(POLICIES)]):
        subprocess.run(
            [sys.executable, "-c", _CLI, *args, "--home", str(home)], env=env, check=True
        )
    done = subprocess.run(
        [sys.executable, "-c", _CLI, "explain-batch", str(path), "--record", "--home", str(home)],
        capture_output=True,
        env=env,
    )
    assert done.returncode == 1 and done.stdout == b""
    assert f"b.jsonl:{bad + 1}: not valid JSON: duplicate key 'account_id'" in done.stderr.decode()
    with AuditLog.open(Home(home)) as log:
        assert log.count() == 1  # the policy save's mutation record alone
    lines[bad] = quick[0]  # and without the bad line, every decision is printed and recorded
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", _CLI, "explain-batch", str(path), "--record", "--home", str(home)],
        capture_output=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    with AuditLog.open(Home(home)) as log:
        assert log.count() == 1 + len(lines)
    with closing(Home(home).connect()) as conn:
        snapshot = PolicyStore(conn).load().snapshot
    # with --record, what is printed is what is recorded: the compact explanation
    decisions = explain_batch(
        [RouteContext.from_dict(json.loads(x)) for x in lines], snapshot, trace="compact"
    )
    assert done.stdout == _want(decisions, Freshness.live())


class _FullDisk(io.FileIO):
    def write(self, b: Any) -> int:
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("failing", ["records", "output"])
def test_a_spool_on_a_full_disk_records_nothing_and_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    # The spools buffer a megabyte: a small batch reaches the disk only when they are flushed.
    # That has to happen before the records are committed, so a full disk under either spool
    # fails the batch with one line, nothing recorded, nothing printed (the review's case).
    from click.testing import CliRunner

    from rensei_routing.cli import cli

    home = tmp_path / "h"
    runner = CliRunner()
    assert runner.invoke(cli, ["init", "--home", str(home)]).exit_code == 0
    saved = runner.invoke(cli, ["policy", "save", str(POLICIES), "--home", str(home)])
    assert saved.exit_code == 0
    lines = (EXAMPLES / "contexts.jsonl").read_text(encoding="utf-8").splitlines() * 20
    source = tmp_path / "b.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    real, made = batch._spool, []

    def spool() -> Any:
        made.append(1)
        # The records spool is made first; the output's first segment with the first lines.
        if len(made) == (1 if failing == "records" else 2):
            fd, name = tempfile.mkstemp(dir=tmp_path)
            os.unlink(name)
            return io.BufferedRandom(_FullDisk(fd, "r+b"), batch._BUFFER)
        return real()

    monkeypatch.setattr(batch, "_spool", spool)
    out = runner.invoke(cli, ["explain-batch", str(source), "--record", "--home", str(home)])
    assert out.exit_code == 3, out.output
    assert out.stdout == ""
    assert "No space left on device" in out.stderr
    assert "Traceback" not in out.stderr
    with AuditLog.open(Home(home)) as log:
        assert log.count() == 1  # the policy save's mutation record alone
