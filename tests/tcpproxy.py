"""A loopback TCP proxy of our own, to partition one process from a server: it forwards every
connection made to its port to ``127.0.0.1:target``, and ``cut()`` closes its listening socket
and every connection through it at once (what killing a proxy process does: the peers see
resets, new connections are refused). Real sockets, one thread per direction; every wait is
bounded. Used to cut one ``rensei serve`` replica off from PostgreSQL."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target>`` until :meth:`cut`."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._cut = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="tcpproxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    @property
    def connections(self) -> int:
        """Connections through the proxy so far (each counts its two sockets once)."""
        with self._lock:
            return len(self._open) // 2

    def cut(self) -> None:
        """Stop accepting and reset every connection through the proxy."""
        self._cut.set()
        self._thread.join(10)
        with self._lock:
            for sock in self._open:  # shutdown wakes the pipe threads blocked on them
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        try:
            while not self._cut.is_set():
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                except OSError:
                    client.close()
                    continue
                upstream.settimeout(None)
                client.settimeout(None)
                with self._lock:
                    self._open += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()
        finally:
            self._listener.close()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
