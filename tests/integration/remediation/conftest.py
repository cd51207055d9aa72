"""Fixtures the remediation tests share."""

from __future__ import annotations

import pytest
from remediation_probe import Fleet


@pytest.fixture()
def fleet(lab):
    """The lab's fleet, its remediation state (breaker, history, progress, marks) reset before and after."""
    fleet = Fleet(lab)
    fleet.reset_state()
    yield fleet
    fleet.reset_state()
