"""``rensei audit prove``, ``audit verify-proof`` and ``audit consistency``: one record's proof
and two checkpoints' consistency, written with the log's home and checked with none. Parses,
calls :mod:`rensei_routing.evidence.proofs`, prints.

Exit codes of the checks (``verify-proof``, ``consistency --check``), as ``audit verify``'s:
0 holds; 1 refused (the verdict, docs/formats.md, leads the ``Error:`` line); 2 usage; 3 could
not check (a file that cannot be read or is malformed, a key that is neither a vkey nor a key
file, a verdict that could not be written).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from ..core.audit.note import Checkpoint
from ..core.audit.tlog import PROOF_MAX_BYTES
from ..errors import InputError, RenseiRoutingError, WitnessError
from ..evidence.policy import TrustedKey, load_key
from ..evidence.proofs import check_consistency, consistency, prove, verify_proof
from ..files import atomic_write
from ..store.notes import read_checkpoint
from ._output import emit, note
from ._root import CommandError, echo_json, home_option, json_option, unused_home_option
from ._store import home_of, refuse_home_target, require_output_dir
from .audit import audit


class ProofRefusedError(CommandError):
    """A proof or consistency check was refused: exit 1."""

    exit_code = 1


class CouldNotCheckError(CommandError):
    """A proof or consistency check could not run (unreadable or malformed input): exit 3."""

    exit_code = 3


def _read(path: Path, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(PROOF_MAX_BYTES + 1)
    except OSError as e:
        raise CouldNotCheckError(f"could not check: cannot read {what} {path}: {e.strerror}") from e


def _keys(trust: str, witnesses: tuple[str, ...]) -> tuple[TrustedKey, list[TrustedKey]]:
    try:
        return load_key(trust), [load_key(w, witness=True) for w in witnesses]
    except (WitnessError, InputError) as e:
        raise CouldNotCheckError(f"could not check: {e}") from e


def _quorum(quorum: int | None, witnesses: tuple[str, ...]) -> None:
    if quorum is not None and quorum > len(witnesses):
        raise click.UsageError(
            f"--quorum {quorum} is more than the {len(witnesses)} --witness keys"
        )


def _refused(e: WitnessError) -> CommandError:
    if e.verdict == "malformed":
        return CouldNotCheckError(f"could not check: {e}")
    return ProofRefusedError(str(e))


def _write(target: Path | None, text: str, home: Path) -> None:
    if target is None:
        emit(text, nl=False)
        return
    require_output_dir(target)
    refuse_home_target(home_of(home), target)
    try:
        atomic_write(target, [text.encode("utf-8")])
    except OSError as e:
        raise CommandError(f"cannot write {target}: {e.strerror or e}") from e


_output_option = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the proof to FILE (default: print it).",
)
_witness_option = click.option(
    "witnesses",
    "--witness",
    multiple=True,
    metavar="KEY",
    help="A witness's cosigner key: its vkey (`rensei keys show --witness-vkey` in the "
    "witness's home) or a file holding it or its ed25519: key (repeatable).",
)
_quorum_option = click.option(
    "--quorum",
    type=click.IntRange(min=0),
    default=None,
    help="How many --witness keys must have cosigned (default: every one given).",
)
_trust_option = click.option(
    "trust",
    "--trust",
    required=True,
    metavar="KEY",
    help="The log's key: its vkey (`rensei keys show --vkey`) or a file holding it or its "
    "ed25519: public key.",
)


@audit.command(name="prove")
@click.argument("seq", type=click.IntRange(min=0, max=2**63 - 1))
@_output_option
@home_option
def audit_prove(seq: int, output: Path | None, home: Path) -> None:
    """Write one self-contained C2SP tlog-proof@v1 of record SEQ: the record (base64 of its
    `audit export` line) as extra, its index and inclusion path, and the latest stored
    checkpoint that covers it (none: one is signed at the head and stored) with every
    cosignature stored for it. `rensei audit verify-proof FILE --trust VKEY` checks it with no
    home."""
    proof = prove(home_of(home), seq)
    _write(output, proof.to_text(), home)
    if output is not None:
        note(
            f"proof of record {seq} in the checkpoint of size {proof.checkpoint.size:,} "
            f"written to {output}"
        )


@audit.command(name="verify-proof")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@_trust_option
@_witness_option
@_quorum_option
@unused_home_option
@json_option
def audit_verify_proof(
    file: Path, trust: str, witnesses: tuple[str, ...], quorum: int | None, json_: bool
) -> None:
    """Check a tlog-proof FILE with no home: the record hashes to its leaf, the path leads to
    the checkpoint's root, the log's key signed it, and --quorum of the --witness keys cosigned
    it.

    \b
    Exit codes:
      0  holds
      1  refused: the verdict leads the Error: line (record-mismatch,
         inclusion-failed, wrong-key, other-origin, bad-signature,
         quorum-not-met)
      2  usage error
      3  could not check: FILE or a key unreadable or malformed
    """
    _quorum(quorum, witnesses)
    key, wkeys = _keys(trust, witnesses)
    data = _read(file, "proof")
    try:
        verdict = verify_proof(data, key, wkeys, quorum)
    except WitnessError as e:
        raise _refused(e) from e
    try:
        if json_:
            echo_json(verdict.to_dict())
        else:
            emit(
                f"holds: record {verdict.index} ({verdict.record_hash}) is in {verdict.origin} "
                f"at size {verdict.size:,}; {verdict.cosigners} trusted witness(es) cosigned"
            )
    except RenseiRoutingError as e:
        raise CouldNotCheckError(f"could not check: {e}") from e


_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")


def _point(text: str, *, home_side: bool) -> int | Checkpoint:
    """A size, or the checkpoint in the file ``text`` names."""
    if _SIZE.fullmatch(text) and not Path(text).exists():
        return int(text)
    try:
        return read_checkpoint(Path(text))
    except RenseiRoutingError as e:
        if home_side:
            raise
        raise CouldNotCheckError(f"could not check: {e}") from e


@audit.command(name="consistency")
@click.argument("old", metavar="OLD")
@click.argument("new", metavar="NEW")
@_output_option
@click.option(
    "check",
    "--check",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Check this consistency proof FILE with no home instead (needs --trust).",
)
@click.option(
    "trust",
    "--trust",
    default=None,
    metavar="KEY",
    help="With --check: the log's key (a vkey, or a file holding it or its ed25519: key).",
)
@home_option
def audit_consistency(
    old: str, new: str, output: Path | None, check: Path | None, trust: str | None, home: Path
) -> None:
    """Write the consistency proof between two checkpoints of this log, OLD and NEW (each a
    size or a checkpoint file), as the body of a C2SP tlog-witness add-checkpoint request:
    `old N`, the proof hashes, a blank line, NEW's checkpoint (a stored one of that size, or
    one signed at the head). What `rensei witness cosign --proof` takes.

    With --check FILE --trust KEY (no home): OLD must be a checkpoint file; checks that both
    checkpoints are signed by KEY, FILE starts from OLD's size and ends at NEW, and its hashes
    join the two roots. Exit codes as `audit verify-proof`'s.
    """
    if check is None:
        if trust is not None:
            raise click.UsageError("--trust applies to --check")
        body = consistency(home_of(home), _point(old, home_side=True), _point(new, home_side=True))
        _write(output, body.to_text(), home)
        if output is not None:
            note(
                f"consistency proof {body.old_size:,} -> {body.checkpoint.size:,} written to "
                f"{output}"
            )
        return
    if trust is None:
        raise click.UsageError("--check needs --trust KEY")
    if output is not None:
        raise click.UsageError("-o applies to writing a proof, not to --check")
    old_cp = _point(old, home_side=False)
    if not isinstance(old_cp, Checkpoint):
        raise click.UsageError("with --check, OLD is the old checkpoint's file")
    key, _ = _keys(trust, ())
    data = _read(check, "consistency proof")
    try:
        body = check_consistency(data, old_cp, _point(new, home_side=False), key)
    except WitnessError as e:
        raise _refused(e) from e
    try:
        emit(
            f"holds: {body.checkpoint.origin} at size {old_cp.size:,} is a prefix of size "
            f"{body.checkpoint.size:,}"
        )
    except RenseiRoutingError as e:
        raise CouldNotCheckError(f"could not check: {e}") from e


__all__ = ["audit_consistency", "audit_prove", "audit_verify_proof"]
