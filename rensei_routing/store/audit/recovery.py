"""Reconciling the segments directory with the catalogue (:mod:`.segments` has the layout), and
reading the catalogue through a log. Owns removing the files no committed rotation or prune
left in use; never removes a file whose records are the evidence of a broken chain.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Final

import apsw

from ..db import store_error
from .attest import unattested
from .handle import LogHandle
from .segments import Segment, SegmentLock, read_catalog, segments_dir

__all__ = ["catalog_of", "recover", "recover_locked"]

_NAME: Final = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)\.db")


def catalog_of(log: LogHandle) -> tuple[Segment, ...]:
    """``log``'s catalogued segments, oldest first.

    Raises:
        StoreError: the database read failed.
    """
    conn = log._read_conn()
    try:
        with conn:
            found = read_catalog(conn)
    except apsw.Error as e:
        raise store_error("cannot read the audit log", e, log._path) from e
    return found


def recover(log: LogHandle) -> None:
    """Reconcile the segments directory with the catalog, when no rotation or prune runs (it
    holds the lock; then there is nothing to reconcile yet): a temporary file of a rotation
    that never committed is removed, and so is a segment file the catalog does not list
    whose records are all still live (the rotation stopped between the rename and its
    commit: the old layout stands); the file of a segment the catalog says is pruned under a
    signed prune statement (the prune stopped between its commit and the unlink) is removed.
    Any other file is left.
    Nothing to reconcile (the common case) takes no lock and writes nothing. Best effort: a
    read-only home is left as it is.
    """
    directory = segments_dir(log._path)
    if not directory.is_dir() or not _stale(log, directory):
        return
    lock = SegmentLock(log._path)
    try:
        if not lock.acquire(wait=False):
            return
    except OSError:
        return
    try:
        recover_locked(log)
    finally:
        lock.release()


def recover_locked(log: LogHandle) -> None:
    """:func:`recover`, for a caller holding the lock."""
    directory = segments_dir(log._path)
    for name in _stale(log, directory):
        with contextlib.suppress(OSError):
            os.unlink(directory / name)


def _prune_signed(log: LogHandle, segment: Segment) -> bool:
    """Whether ``segment``'s row is marked pruned under a prune statement signed by the log's
    key: only then is its file removed (a row flipped to pruned by hand is a broken chain, and
    the file its records are in is the evidence; it is never deleted for it)."""
    public = log._public
    return public is not None and unattested(segment, log.origin, public) is None


def _stale(log: LogHandle, directory: Path) -> list[str]:
    """The files of ``directory`` that :func:`recover` removes (none if it cannot tell)."""
    conn = log._read_conn()
    stale: list[str] = []
    try:
        with conn:
            catalog = {s.name: s for s in read_catalog(conn)}
            for name in sorted(os.listdir(directory)):
                if name.startswith(".") and ".tmp" in name:
                    stale.append(name)
                    continue
                match = _NAME.fullmatch(name)
                if match is None:
                    continue
                known = catalog.get(name[:-3])
                if known is not None:
                    if known.pruned and _prune_signed(log, known):
                        stale.append(name)
                    continue
                first, last = int(match[1]), int(match[2])
                live = conn.execute(
                    "SELECT count(*) FROM audit_records WHERE seq >= ? AND seq <= ?", (first, last)
                ).get
                if live == last - first + 1:
                    stale.append(name)
    except (apsw.Error, OSError):
        return []
    return stale
