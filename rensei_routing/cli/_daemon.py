"""What the long-running commands (`serve`, `ui`, `host run`) share: SIGTERM/SIGINT as a stop
event, the log on stderr, and the listening servers' --host and --port. Holds no command."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["listen_options", "log_to_stderr", "stop_on_sigterm"]


def listen_options(*, port: int, printed: str) -> Callable[[F], F]:
    """``--host`` (the address to bind, passed as ``bind``) and ``--port`` (default ``port``;
    0 picks a free one, whose number is ``printed`` where the command says)."""

    def decorate(f: F) -> F:
        f = click.option(
            "--port",
            type=click.IntRange(0, 65535),
            default=port,
            show_default=True,
            help=f"Port to listen on (0: any free port, printed {printed}).",
        )(f)
        return click.option(
            "--host", "bind", default="127.0.0.1", show_default=True, help="Address to bind."
        )(f)

    return decorate


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
