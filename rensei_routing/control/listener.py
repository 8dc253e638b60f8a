"""The waitress listener behind ``rensei serve`` and ``host run --listen``: its loop thread, its
connection limits, and how it stops.

Owns three promises (docs/operations.md "Serving"):

- **Sockets belong to the loop thread.** Only the loop thread opens, polls and closes them.
  :meth:`RunningServer.stop` sets a flag and wakes the loop; if the wake-up pipe is unusable the
  loop sees the flag at its next poll timeout (one second) and closes everything itself. The
  wake-up pipe, which the workers write to as well, is closed by :meth:`RunningServer.stop`
  once the loop and the workers are done.
- **Stopping drains.** The loop closes the listening socket, closes idle and half-received
  connections, lets every connection with a request in flight send its whole response, and
  ends when none is left or the drain deadline passes (then it closes what remains).
- **Slow clients cannot hold every slot.** A request must arrive whole within
  ``request_timeout_s`` of its first byte (or of the connection, when it sent nothing), an idle
  connection is closed after ``idle_timeout_s``, headers and bodies are bounded, and a server at
  its connection limit closes its oldest connection still waiting for a request, so a host's
  connection is accepted and answered even while slow clients keep connecting.

Adapter: waitress only; the WSGI app is given.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, cast

import waitress.adjustments
import waitress.channel
import waitress.server
import waitress.task
import waitress.wasyncore as wasyncore

__all__ = ["DEFAULT_LIMITS", "Limits", "RunningServer", "serve_in_thread"]

log = logging.getLogger("rensei_routing.http")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

#: The loop's poll timeout (seconds): the longest a stop waits when the wake-up pipe fails.
_POLL_S: Final = 1.0
#: The poll timeout while draining: how soon a finished connection is noticed and closed.
_DRAIN_POLL_S: Final = 0.05
#: Descriptors kept free of the connection limit (database, logs, the wake-up pipe).
_SPARE_FDS: Final = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Per-server and per-connection bounds (docs/operations.md has the figures).

    ``connection_limit`` is lowered to what the process's descriptor limit allows.
    """

    connection_limit: int = 1000
    request_timeout_s: float = 10.0
    idle_timeout_s: int = 30
    max_header_bytes: int = 16384
    max_body_bytes: int = 1024
    threads: int = 4

    def effective_connection_limit(self) -> int:
        """``connection_limit``, capped by ``RLIMIT_NOFILE`` less a reserve."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.connection_limit
        return max(1, min(self.connection_limit, int(soft) - _SPARE_FDS))


DEFAULT_LIMITS: Final = Limits()

# waitress's published stubs disagree with waitress 3 (the socket map, ``active_channels``,
# ``listen``), so the two classes below extend it untyped.
_HTTPChannel: Any = waitress.channel.HTTPChannel
_TcpWSGIServer: Any = waitress.server.TcpWSGIServer


class _Channel(_HTTPChannel):  # type: ignore[misc]  # untyped base
    """A waitress channel that remembers when the request it is receiving began."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_started: float = self.creation_time

    def received(self, data: bytes) -> bool:
        if self.request is None and data:
            self.request_started = time.time()
        return bool(super().received(data))

    def waiting(self) -> bool:
        """Whether the channel holds no request to answer and nothing to send: it is idle or
        still receiving a request."""
        return not self.requests and not self.total_outbufs_len


class _Server(_TcpWSGIServer):  # type: ignore[misc]  # untyped base
    """waitress's TCP server with the request deadline and shedding at the limit. Both only
    set ``will_close`` (waitress closes the channel in its own write step), because they run
    inside ``readable()``, while the loop is collecting descriptors."""

    channel_class = _Channel
    request_timeout_s: float = DEFAULT_LIMITS.request_timeout_s

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        cutoff = now - self.request_timeout_s
        for channel in list(self.active_channels.values()):
            late = channel.request is not None and channel.request_started < cutoff
            if late and channel.waiting() and not channel.will_close:
                log.info("closing %s: request not received within the deadline", channel.addr)
                channel.will_close = True

    def readable(self) -> bool:
        if self.accepting and len(self._map) >= self.adj.connection_limit:
            self._shed()
        return bool(super().readable())

    def _shed(self) -> None:
        """Mark the oldest connections still waiting for a request for closing, enough to get
        back under the limit (connections with a request in flight are never shed)."""
        channels = list(self.active_channels.values())
        closing = sum(1 for c in channels if c.will_close)
        excess = len(self._map) - self.adj.connection_limit + 1 - closing
        if excess <= 0:
            return
        # Oldest by when the connection was made, not by its request's first byte: a slow
        # client that connected early and trickles its first byte in late is older than a
        # host's connection accepted since and not yet read.
        waiting = sorted(
            (c for c in channels if c.waiting() and not c.will_close),
            key=lambda c: c.creation_time,
        )
        for channel in waiting[:excess]:
            channel.will_close = True


class RunningServer:
    """A waitress server running its loop in a background thread. See the module docstring for
    the promises; ``drain_s`` is the default drain deadline of :meth:`stop`."""

    def __init__(
        self,
        app: WSGIApp,
        *,
        host: str,
        port: int,
        limits: Limits = DEFAULT_LIMITS,
        drain_s: float = 0.0,
    ) -> None:
        adj: Any = waitress.adjustments.Adjustments(
            host=host,
            port=port,
            threads=limits.threads,
            connection_limit=limits.effective_connection_limit(),
            channel_timeout=limits.idle_timeout_s,
            cleanup_interval=1,
            max_request_header_size=limits.max_header_bytes,
            max_request_body_size=limits.max_body_bytes,
            asyncore_use_poll=True,
        )
        dispatcher = waitress.task.ThreadedTaskDispatcher()
        dispatcher.set_thread_count(adj.threads)
        self._map: dict[int, Any] = {}
        server: Any = _Server(
            app, self._map, dispatcher=dispatcher, adj=adj, sockinfo=adj.listen[0]
        )
        server.request_timeout_s = limits.request_timeout_s
        self._server = cast(Any, server)
        self.port: int = int(server.effective_port)
        self.connection_limit: int = int(adj.connection_limit)
        self.drain_s = drain_s
        self._stopping = threading.Event()
        self._drain_deadline = 0.0
        self._thread = threading.Thread(target=self._loop, name="http", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the loop thread still runs."""
        return self._thread.is_alive()

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                wasyncore.poll2(_POLL_S, self._map)
            self._drain()
        finally:
            for channel in list(self._server.active_channels.values()):
                with contextlib.suppress(OSError):
                    channel.handle_close()  # closes its buffers too (close_all does not)
            # The wake-up pipe outlives the loop: a worker finishing a response pulls it, and
            # a closed pipe's descriptor may already be another file's. :meth:`stop` closes it
            # once the workers are done.
            trigger = self._server.trigger
            for fd, dispatcher in list(self._map.items()):
                if dispatcher is trigger:
                    del self._map[fd]
            wasyncore.close_all(self._map, ignore_all=True)

    def _drain(self) -> None:
        server = self._server
        wasyncore.dispatcher.close(server)  # stop accepting (the wake-up pipe stays open)
        busy = sum(1 for c in server.active_channels.values() if not c.waiting())
        if busy:
            left = max(0.0, self._drain_deadline - time.monotonic())
            log.info("stopped accepting; draining %d response(s) for up to %.0fs", busy, left)
        while True:
            channels = list(server.active_channels.values())
            if not channels:
                return
            busy = 0
            for channel in channels:
                if not channel.waiting():
                    busy += 1
                elif not channel.will_close:
                    channel.will_close = True  # idle or half-received: closed at the next poll
            if time.monotonic() >= self._drain_deadline:
                if busy:
                    log.warning("drain deadline passed: closing %d busy connection(s)", busy)
                return
            wasyncore.poll2(_DRAIN_POLL_S, self._map)

    def stop(self, drain_s: float | None = None, timeout: float = 10.0) -> None:
        """Stop the loop (draining in-flight responses for up to ``drain_s`` seconds, default
        the server's ``drain_s``), wait for it to end, then let the worker threads finish."""
        drain = self.drain_s if drain_s is None else drain_s
        self._drain_deadline = time.monotonic() + drain
        self._stopping.set()
        # an unusable wake-up pipe (EBADF seen under a full test run): the loop then sees the
        # flag at its next poll timeout
        with contextlib.suppress(OSError):
            self._server.trigger.pull_trigger()
        self._thread.join(timeout + drain + _POLL_S)
        dispatcher = self._server.task_dispatcher
        dispatcher.shutdown()
        # Closed only when neither the loop polls it nor a worker can pull it: a worker still
        # running past the shutdown's wait keeps it open (a pipe left, never a stray write).
        if not self._thread.is_alive() and not dispatcher.threads:
            with contextlib.suppress(OSError):
                self._server.trigger.close()


def serve_in_thread(
    app: WSGIApp, *, host: str, port: int, threads: int = 2, drain_s: float = 0.0
) -> RunningServer:
    """Start serving ``app`` on ``host:port`` (0 = any free port) in a background thread."""
    return RunningServer(app, host=host, port=port, limits=Limits(threads=threads), drain_s=drain_s)
