"""``rensei audit prove`` / ``verify-proof`` / ``consistency`` and ``audit checkpoint
--add-cosignature`` on a real home: proofs written with the log's home, checked with none, and
every forged or mismatched input refused with its verdict. The log signs tree-root checkpoints
(their hash line the tree's root), which is what a proof is checked against."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from click.testing import CliRunner

from rensei_routing.cli import cli
from rensei_routing.store.home import Home

CONTEXT = '{"repo":"github.com/a/b","role":"implementer"}'


def _run(runner: CliRunner, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(cli, list(args))
    assert "Traceback" not in r.output
    return r.exit_code, r.stdout, r.stderr


def _ok(runner: CliRunner, *args: str) -> str:
    code, out, err = _run(runner, *args)
    assert code == 0, err
    return out


def _append(runner: CliRunner, home: Path, n: int) -> None:
    for _ in range(n):
        _ok(runner, "--home", str(home), "explain", CONTEXT, "--record")


@pytest.fixture
def homes(tmp_path: Path, runner: CliRunner) -> tuple[Path, Path, str, str]:
    log, wit = tmp_path / "log", tmp_path / "wit"
    _ok(runner, "--home", str(log), "init", "--org", "acme")
    _ok(runner, "--home", str(wit), "init", "--org", "wit")
    _append(runner, log, 5)
    vkey = _ok(runner, "--home", str(log), "keys", "show", "--vkey").strip()
    wkey = _ok(runner, "--home", str(wit), "keys", "show", "--witness-vkey").strip()
    return log, wit, vkey, wkey


def _cosigned(runner: CliRunner, log: Path, wit: Path, vkey: str, cp: Path) -> str:
    """A checkpoint of ``log`` written to ``cp`` and the witness's cosignature line of it."""
    _ok(runner, "--home", str(log), "audit", "checkpoint", "-o", str(cp))
    return _ok(runner, "--home", str(wit), "witness", "cosign", str(cp), "--trust", vkey)


def test_prove_then_verify_with_a_witness_quorum(
    homes: tuple[Path, Path, str, str], runner: CliRunner, tmp_path: Path
) -> None:
    log, wit, vkey, wkey = homes
    cos = tmp_path / "cos5"
    cos.write_text(_cosigned(runner, log, wit, vkey, tmp_path / "cp5"))
    _ok(
        runner,
        "--home",
        str(log),
        "audit",
        "checkpoint",
        "--add-cosignature",
        str(cos),
        "--witness",
        wkey,
    )
    proof = tmp_path / "p2.tlog-proof"
    _ok(runner, "--home", str(log), "audit", "prove", "2", "-o", str(proof))
    text = proof.read_text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ") and "\nindex 2\n" in text
    assert cos.read_text() in text  # the stored cosignature travels with the proof
    out = _ok(runner, "audit", "verify-proof", str(proof), "--trust", vkey, "--witness", wkey)
    assert out.startswith("holds: record 2 ")
    _ok(runner, "audit", "verify-proof", str(proof), "--trust", str(log / "keys" / "host.pub"))
    # audit verify holds the newest stored checkpoint to the policy.
    assert _run(runner, "--home", str(log), "audit", "verify", "--witness", wkey)[0] == 0
    _append(runner, log, 1)
    _ok(runner, "--home", str(log), "audit", "checkpoint")
    code, _, err = _run(runner, "--home", str(log), "audit", "verify", "--witness", wkey)
    assert code == 1 and "quorum-not-met" in err


def _tamper(text: str, what: str) -> str:
    lines = text.split("\n")
    if what == "record":
        line = base64.b64decode(lines[1][6:]).replace(b'"seq":2', b'"seq":3')
        lines[1] = "extra " + base64.b64encode(line).decode()
    elif what == "path":
        h = bytearray(base64.b64decode(lines[3]))
        h[0] ^= 1
        lines[3] = base64.b64encode(bytes(h)).decode()
    elif what == "index":
        lines[2] = "index 1"
    elif what == "root":
        i = lines.index("") + 3
        h = bytearray(base64.b64decode(lines[i]))
        h[0] ^= 1
        lines[i] = base64.b64encode(bytes(h)).decode()
    elif what == "garbage":
        return "c2sp.org/tlog-proof@v1\nindex x\n"
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("what", "verdict", "code"),
    [
        ("record", "record-mismatch", 1),
        ("path", "inclusion-failed", 1),
        ("index", "record-mismatch", 1),
        ("root", "bad-signature", 1),
        ("garbage", "malformed", 3),
    ],
)
def test_a_forged_proof_is_refused_with_its_verdict(
    what: str,
    verdict: str,
    code: int,
    homes: tuple[Path, Path, str, str],
    runner: CliRunner,
    tmp_path: Path,
) -> None:
    log, _, vkey, _ = homes
    proof = tmp_path / "p.tlog-proof"
    _ok(runner, "--home", str(log), "audit", "prove", "2", "-o", str(proof))
    forged = tmp_path / "forged"
    forged.write_text(_tamper(proof.read_text(), what))
    got, out, err = _run(runner, "audit", "verify-proof", str(forged), "--trust", vkey)
    assert (got, out) == (code, "") and verdict in err and err.count("\n") == 1


def test_wrong_key_other_origin_and_quorum(
    homes: tuple[Path, Path, str, str], runner: CliRunner, tmp_path: Path
) -> None:
    log, wit, vkey, wkey = homes
    proof = tmp_path / "p"
    _ok(runner, "--home", str(log), "audit", "prove", "0", "-o", str(proof))
    code, _, err = _run(
        runner, "audit", "verify-proof", str(proof), "--trust", str(wit / "keys" / "host.pub")
    )
    assert code == 1 and err.startswith("Error: wrong-key")
    other = _ok(runner, "--home", str(wit), "keys", "show", "--vkey").strip()
    code, _, err = _run(runner, "audit", "verify-proof", str(proof), "--trust", other)
    assert code == 1 and err.startswith("Error: other-origin")
    code, _, err = _run(
        runner, "audit", "verify-proof", str(proof), "--trust", vkey, "--witness", wkey
    )
    assert code == 1 and err.startswith("Error: quorum-not-met")
    code, _, err = _run(
        runner,
        "audit",
        "verify-proof",
        str(proof),
        "--trust",
        vkey,
        "--witness",
        wkey,
        "--quorum",
        "0",
    )
    assert code == 0


def test_consistency_written_checked_and_taken_by_a_witness(
    homes: tuple[Path, Path, str, str], runner: CliRunner, tmp_path: Path
) -> None:
    log, wit, vkey, _ = homes
    cp5, cp8, c58 = tmp_path / "cp5", tmp_path / "cp8", tmp_path / "c58"
    _ok(runner, "--home", str(log), "audit", "checkpoint", "-o", str(cp5))
    _append(runner, log, 3)
    _ok(runner, "--home", str(log), "audit", "checkpoint", "-o", str(cp8))
    _ok(runner, "--home", str(log), "audit", "consistency", str(cp5), "8", "-o", str(c58))
    assert c58.read_text().startswith("old 5\n")
    out = _ok(
        runner, "audit", "consistency", str(cp5), str(cp8), "--check", str(c58), "--trust", vkey
    )
    assert out.startswith("holds: ")
    _ok(runner, "--home", str(wit), "witness", "cosign", str(cp5), "--trust", vkey)
    _ok(
        runner,
        "--home",
        str(wit),
        "witness",
        "cosign",
        str(cp8),
        "--trust",
        vkey,
        "--proof",
        str(c58),
    )
    lines = c58.read_text().split("\n")
    h = bytearray(base64.b64decode(lines[1]))
    h[-1] ^= 1
    lines[1] = base64.b64encode(bytes(h)).decode()
    bad = tmp_path / "bad"
    bad.write_text("\n".join(lines))
    code, _, err = _run(
        runner, "audit", "consistency", str(cp5), str(cp8), "--check", str(bad), "--trust", vkey
    )
    assert code == 1 and err.startswith("Error: inconsistent")
    code, _, err = _run(
        runner, "audit", "consistency", str(cp8), str(cp8), "--check", str(c58), "--trust", vkey
    )
    assert code == 1 and err.startswith("Error: old-size-mismatch")


def test_add_cosignature_refuses_a_line_no_key_verifies(
    homes: tuple[Path, Path, str, str], runner: CliRunner, tmp_path: Path
) -> None:
    log, wit, vkey, wkey = homes
    line = _cosigned(runner, log, wit, vkey, tmp_path / "cp")
    blob = bytearray(base64.b64decode(line.split(" ")[2]))
    blob[-1] ^= 1
    forged = tmp_path / "forged"
    forged.write_text(
        line.split(" ")[0]
        + " "
        + line.split(" ")[1]
        + " "
        + base64.b64encode(bytes(blob)).decode()
        + "\n"
    )
    code, _, err = _run(
        runner,
        "--home",
        str(log),
        "audit",
        "checkpoint",
        "--add-cosignature",
        str(forged),
        "--witness",
        wkey,
    )
    assert code == 1 and err.startswith("Error: unverified-cosignature")
    conn = Home(log).connect()
    try:
        assert conn.execute("SELECT count(*) FROM audit_cosignatures").fetchone()[0] == 0
    finally:
        conn.close()
