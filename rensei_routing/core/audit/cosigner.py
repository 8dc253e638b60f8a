"""What a witness may cosign: the rule that keeps a witness's view of a log append-only. Pure:
the view and the request are arguments; reading and advancing the stored view is
:mod:`rensei_routing.store.witness`'s, signing the service's.

A witness holds, per log origin, the latest checkpoint it cosigned (its *view*: size, root, the
log's key). A request brings a checkpoint signed by the log and, unless it is the first for the
origin, an ``add-checkpoint`` body (C2SP tlog-witness): ``old N``, a consistency proof from
size ``N`` to the checkpoint's size, the checkpoint. :func:`check_request` raises
:class:`~rensei_routing.errors.WitnessRefusedError` with one of these verdicts, in this order:

``other-log-key``
    the view of this origin was made under another log key.
``backwards``
    the checkpoint is smaller than the view.
``conflict``
    the checkpoint has the view's size but another root (the log shows two histories).
``proof-required``
    the checkpoint is larger than the view and no consistency proof came with it.
``old-size-mismatch``
    the proof starts from another size than the view's (0 when there is no view).
``inconsistent``
    the proof does not join the view's root to the checkpoint's.

The first checkpoint of an origin needs no proof (a proof from ``old 0``, empty, is accepted
too), nor does one after a view of size 0 (every tree extends the empty one). The checkpoint
the view already holds is cosigned again (a proof, if given, must still start from the view's
size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import ProofError, WitnessRefusedError
from .merkle import EMPTY_ROOT, verify_consistency

__all__ = ["View", "check_request"]


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """A witness's view of one log: the size and root it last cosigned, under ``log_key``."""

    size: int
    root: bytes
    log_key: str


def check_request(
    view: View | None,
    *,
    size: int,
    root: bytes,
    log_key: str,
    old_size: int | None,
    proof: Sequence[bytes],
) -> None:
    """Check that a checkpoint of ``size`` and ``root`` (signed by ``log_key``, checked by the
    caller) may be cosigned over ``view``; ``old_size`` is ``None`` when no proof came.

    Raises:
        WitnessRefusedError: the verdicts of the module docstring; nothing may be written.
    """
    held, held_root = (0, EMPTY_ROOT) if view is None else (view.size, view.root)
    if view is not None and view.log_key != log_key:
        raise WitnessRefusedError(
            "other-log-key",
            f"this witness cosigned this origin under log key {view.log_key}, not {log_key}",
        )
    if size < held:
        raise WitnessRefusedError(
            "backwards",
            f"the checkpoint's size {size:,} is below the size {held:,} already cosigned",
        )
    if view is not None and size == held and root != held_root:
        raise WitnessRefusedError(
            "conflict",
            f"the checkpoint has the size {size:,} already cosigned but another root: "
            "the log shows two histories",
        )
    if old_size is None:
        if view is not None and size > held > 0:
            raise WitnessRefusedError(
                "proof-required",
                f"a consistency proof from size {held:,} to {size:,} is needed (rensei audit "
                f"consistency {held} {size} -o FILE, in the log's home)",
            )
        return
    if old_size != held:
        raise WitnessRefusedError(
            "old-size-mismatch",
            f"the proof starts from size {old_size:,}, but the size this witness last "
            f"cosigned is {held:,}",
        )
    try:
        verify_consistency(held, size, held_root, root, proof)
    except ProofError as e:
        raise WitnessRefusedError(
            "inconsistent",
            f"the proof does not join size {held:,} to size {size:,} ({e.reason})",
        ) from e
