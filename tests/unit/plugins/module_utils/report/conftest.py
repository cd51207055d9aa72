# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The two sample drills: an XID 79 drill where every loop step passed, and the same drill in a lab
whose remediation was switched off (scheduler and recovered fail, two observability gaps)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PASSED = json.loads((HERE / "sample_drill.json").read_text(encoding="utf-8"))
FAILED = json.loads((HERE / "sample_drill_failed.json").read_text(encoding="utf-8"))


@pytest.fixture
def passed():
    return copy.deepcopy(PASSED)


@pytest.fixture
def failed():
    return copy.deepcopy(FAILED)
