# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A hung server for the timeout tests: it accepts every TCP connection and never writes a byte."""

from __future__ import annotations

import socket
import threading
from typing import Iterator, List

import pytest


class HungServer:
    """Listens on 127.0.0.1, accepts and holds each connection open without ever answering (a hung API
    server, Prometheus or webhook: the kernel handshake succeeds, the application never replies)."""

    def __init__(self) -> None:
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.accepted: List[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="hung-server", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return "127.0.0.1:%d" % self.port

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _peer = self.listener.accept()
            except OSError:
                continue
            self.accepted.append(conn)  # held, never read from or written to

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self.accepted:
            conn.close()
        self.listener.close()


@pytest.fixture
def hung_server() -> Iterator[HungServer]:
    server = HungServer()
    try:
        yield server
    finally:
        server.close()
