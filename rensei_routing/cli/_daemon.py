"""What the long-running commands (`serve`, `host run`) share: SIGTERM/SIGINT as a stop event
and the log on stderr. Holds no command."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["log_to_stderr", "stop_on_sigterm"]


@contextmanager
def stop_on_sigterm() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT (restoring the previous handlers on exit)."""
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def log_to_stderr() -> None:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )
