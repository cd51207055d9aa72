# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures of the plugin unit tests.

``child_env``: the environment for a test's ``python -m ansible_collections...`` child process, with
the collection's root on PYTHONPATH. Under ansible-test the parent finds ``ansible_collections``
through Ansible's collection loader, which a child does not have.

``hung_server``: a hung server for the timeout tests: it accepts every TCP connection and never
writes a byte.

``hung_server`` also warms the ``kubernetes`` client once per session (one call to a closed port,
refused at once): in a fresh virtual environment (ansible-test units) the first use of CoreV1Api
compiles and imports its large modules, which takes seconds on a loaded machine and is not the
timeout the tests measure."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Dict, Iterator, List

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


@pytest.fixture(scope="session")
def warm_kubernetes_client(tmp_path_factory) -> None:
    try:
        from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import core_v1
    except ImportError:  # pragma: no cover - the tests that need it import it themselves
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    kubeconfig = tmp_path_factory.mktemp("warm") / "closed.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- {name: c, cluster: {server: 'http://127.0.0.1:%d'}}\n"
        "users:\n- {name: u, user: {token: t}}\ncontexts:\n- {name: c, context: {cluster: c, user: u}}\n"
        "current-context: c\n" % closed)
    with contextlib.suppress(Exception):  # refused: the point was the imports on the way
        core_v1(str(kubeconfig), timeout=(2.0, 2.0)).read_node("warm-up")


@pytest.fixture
def hung_server(warm_kubernetes_client) -> Iterator[HungServer]:
    server = HungServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def child_env() -> Dict[str, str]:
    from ansible_collections.gpufleet import resilience

    # <root>/ansible_collections/gpufleet/resilience: the root is what a child's sys.path needs.
    root = str(Path(next(iter(resilience.__path__))).parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
