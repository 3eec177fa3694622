"""A loopback TCP proxy that a test can cut, to drop a browser's live connections the way a
network failure does (the browser sees its connections die, then reconnects through it)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class TcpProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        with suppress(OSError):
            while chunk := source.recv(65536):
                target.sendall(chunk)
        for sock in (source, target):
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def cut(self) -> int:
        """Drops every open connection at once; returns how many sockets were cut."""
        with self._lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            self._close(sock)
        return len(open_sockets)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        self.cut()


@contextmanager
def tcp_proxy(base_url: str) -> Iterator[TcpProxy]:
    proxy = TcpProxy(int(base_url.rsplit(":", 1)[1]))
    try:
        yield proxy
    finally:
        proxy.close()
