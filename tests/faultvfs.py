"""A fault-injecting SQLite VFS for tests: wraps the default VFS and fails chosen file calls.

Armed with ``arm(method, n)``, it counts calls of ``method`` (``xWrite``, ``xSync``,
``xTruncate`` or ``xFileControl``) on every file of every connection opened through it, and
fails the n-th one, and (``persistent=True``, a disk that stays broken) every later one until
``disarm()``. The failure is ``error`` (``apsw.IOError`` = SQLITE_IOERR, ``apsw.FullError`` =
SQLITE_FULL). ``hits`` counts the failures injected, so a loop over n = 1, 2, ... knows it has
passed the last fault point when an operation completes with ``hits == 0`` -- the way SQLite's
own test harness walks I/O errors.

Run as a script, it registers itself as the default VFS, arms from the environment
(``FAULT_METHOD``, ``FAULT_N``, ``FAULT_ERROR`` = ``io`` or ``full``) and runs the ``rensei``
CLI with the remaining arguments, so CLI tests see a real process fail a real write; the number
of faults it injected is written to the file ``FAULT_REPORT`` names.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import apsw

METHODS = ("xWrite", "xSync", "xTruncate", "xFileControl")


class FaultVFS(apsw.VFS):
    """The default VFS, with the n-th call of one method failing (see the module docstring)."""

    def __init__(self, name: str = "fault", *, makedefault: bool = False) -> None:
        self.vfs_name = name
        self.method: str | None = None
        self.fail_at = 0
        self.calls = 0
        self.hits = 0
        self.persistent = True
        self.error: type[apsw.Error] = apsw.IOError
        self.base = apsw.vfs_names()[0]  # the default VFS before this one, e.g. "unix"
        super().__init__(name, self.base, makedefault=makedefault)

    def arm(
        self,
        method: str,
        n: int,
        *,
        error: type[apsw.Error] = apsw.IOError,
        persistent: bool = True,
    ) -> None:
        assert method in METHODS and n >= 1
        self.method, self.fail_at, self.error, self.persistent = method, n, error, persistent
        self.calls = self.hits = 0

    def disarm(self) -> None:
        self.method = None

    def check(self, method: str) -> None:
        if method != self.method:
            return
        self.calls += 1
        if self.calls == self.fail_at or (self.persistent and self.calls > self.fail_at):
            self.hits += 1
            raise self.error(f"injected fault: {method} call {self.calls}")

    def xOpen(self, name: Any, flags: list[int]) -> FaultFile:
        return FaultFile(self, name, flags)


class FaultFile(apsw.VFSFile):
    """One file of the default VFS whose writes, syncs, truncates and file controls can fail."""

    def __init__(self, vfs: FaultVFS, name: Any, flags: list[int]) -> None:
        self._vfs = vfs
        super().__init__(vfs.base, name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        self._vfs.check("xWrite")
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._vfs.check("xSync")
        super().xSync(flags)

    def xTruncate(self, newsize: int) -> None:
        self._vfs.check("xTruncate")
        super().xTruncate(newsize)

    def xFileControl(self, op: int, ptr: int) -> bool:
        self._vfs.check("xFileControl")
        return bool(super().xFileControl(op, ptr))


def _main() -> None:
    vfs = FaultVFS(makedefault=True)
    error = apsw.FullError if os.environ.get("FAULT_ERROR") == "full" else apsw.IOError
    vfs.arm(os.environ["FAULT_METHOD"], int(os.environ["FAULT_N"]), error=error)
    from rensei_routing.cli import cli

    try:
        cli.main(sys.argv[1:], prog_name="rensei")
    finally:
        with open(os.environ["FAULT_REPORT"], "w") as f:
            f.write(str(vfs.hits))


if __name__ == "__main__":
    _main()
