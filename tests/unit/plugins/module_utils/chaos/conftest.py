# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Fixtures of the chaos unit tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def bare_metal(tmp_path, monkeypatch):
    """Gate parameters for one opted-in node without Kubernetes: the ledger is a file."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return {"experiment": "gpu_thermal", "target": "n1", "duration": 60, "params": {},
            "ledger_file": str(tmp_path / "ledger.json"), "allowed_nodes": ["n1"]}
