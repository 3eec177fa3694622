"""The loopback ports the local model server listens on."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on `port`: servers bind with SO_REUSEADDR, so connections
    of an earlier server left in TIME_WAIT do not count, only a listener does."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = HOST) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use_error(port: int, host: str, what: str) -> str:
    return f"Port {port} on {host} is in use by another program: stop it, or {what}."
