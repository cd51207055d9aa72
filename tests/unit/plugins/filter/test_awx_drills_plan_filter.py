"""The awx_drills_plan filter: a bad field becomes an AnsibleFilterError naming it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.filter.awx_drills_plan import FilterModule

PLAN = FilterModule().filters()["awx_drills_plan"]
DRILL = {"name": "x", "experiment": "gpu_xid", "target": "gpu-a-003",
         "rrule": "DTSTART:20270101T010000Z RRULE:FREQ=DAILY"}


def test_plan_with_prefix():
    assert PLAN([DRILL], prefix="drills/")["drills"][0]["template_name"] == "drills/x"


def test_bad_field_is_a_filter_error_naming_it():
    with pytest.raises(AnsibleFilterError, match=r"awx_drills_plan: awx_drills_drills\[0\]\.rrule"):
        PLAN([dict(DRILL, rrule="every day")])
    with pytest.raises(AnsibleFilterError, match="awx_drills_notifications: must be a list"):
        PLAN([DRILL], notifications={"name": "ops"})
