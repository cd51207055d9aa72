"""Captured Slurm output (22.05, 24.11 and 26.05) for the parser and runner tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[5]
# Real Slurm 22.05, 24.11 and 26.05 output, kept in the repository (tests/fixtures/slurm-captures, with
# its README); ansible-test units copies the tree, fixtures included. GPUFLEET_SLURM_CAPTURES may
# point at another set, e.g. a newer Slurm's.
CAPTURES = Path(os.environ.get("GPUFLEET_SLURM_CAPTURES") or REPO / "tests" / "fixtures" / "slurm-captures")


class Captures:
    def __init__(self, root: Path) -> None:
        self.root = root

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text()


@pytest.fixture
def captures() -> Captures:
    # Missing captures are a broken checkout, not a reason to skip: the parser tests need them.
    assert CAPTURES.is_dir(), "Slurm captures not found at %s" % CAPTURES
    return Captures(CAPTURES)


@pytest.fixture
def utc(monkeypatch):
    """JSON gives reason times in epoch seconds, text in the capture host's local time (UTC)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
