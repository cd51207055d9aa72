"""Captured Slurm output (22.05 and 24.11) for the parser and runner tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[5]
# The captures live beside the repo (../shared/data/slurm-captures); ansible-test units runs on a
# copy of the tree elsewhere, so GPUFLEET_SLURM_CAPTURES may point at them.
CAPTURES = Path(os.environ.get("GPUFLEET_SLURM_CAPTURES") or REPO / ".." / "shared" / "data" / "slurm-captures")


class Captures:
    def __init__(self, root: Path) -> None:
        self.root = root

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text()


@pytest.fixture
def captures() -> Captures:
    if not CAPTURES.is_dir():
        pytest.skip("Slurm captures not found at %s (set GPUFLEET_SLURM_CAPTURES)" % CAPTURES)
    return Captures(CAPTURES)


@pytest.fixture
def utc(monkeypatch):
    """JSON gives reason times in epoch seconds, text in the capture host's local time (UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
