"""The scheduled-drill entries: defaults, and the bad field named before anything is written."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.schedule import check
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

GOOD = {"name": "weekly-xid79", "experiment": "gpu_xid", "target": "gpu-a-003", "when": "Mon *-*-* 03:30:00",
        "params": {"xid": 79}}


def test_defaults_are_filled_in():
    (drill,) = check([GOOD], "systemd")
    assert drill == dict(GOOD, duration=600, dry_run=False, enabled=True, extra_vars={})


@pytest.mark.parametrize("when", ["30 3 * * 1", "*/15 * * * *", "0 2 1-7 * mon", "0 0,12 * jan,jul *", "@daily"])
def test_crontab_lines_that_cron_takes(when):
    assert check([dict(GOOD, when=when)], "cron")[0]["when"] == when


@pytest.mark.parametrize(("change", "field"), [
    ({"name": "Weekly"}, "drill_schedule_drills[0].name"),
    ({"name": "a.b"}, "drill_schedule_drills[0].name"),
    ({"experiment": "gpu_meltdown"}, "drill_schedule_drills[0].experiment"),
    ({"target": " "}, "drill_schedule_drills[0].target"),
    ({"when": "30 3 * *"}, "drill_schedule_drills[0].when"),
    ({"when": "30 3 * * 1 extra"}, "drill_schedule_drills[0].when"),
    ({"when": "0 3 * * 1\n* * * * * root rm -rf /"}, "drill_schedule_drills[0].when"),
    ({"when": "0 3 % * *"}, "drill_schedule_drills[0].when"),
    ({"duration": 0}, "drill_schedule_drills[0].duration"),
    ({"duration": True}, "drill_schedule_drills[0].duration"),
    ({"dry_run": "yes"}, "drill_schedule_drills[0].dry_run"),
    ({"params": [1]}, "drill_schedule_drills[0].params"),
    ({"colour": "red"}, "drill_schedule_drills[0].colour"),
])
def test_a_bad_entry_names_its_field(change, field):
    with pytest.raises(FieldError) as raised:
        check([{**GOOD, "when": "30 3 * * 1", **change}], "cron")
    assert raised.value.field == field


def test_names_are_unique_and_the_backend_known():
    with pytest.raises(FieldError) as twice:
        check([GOOD, dict(GOOD, target="gpu-a-001")], "systemd")
    assert twice.value.field == "drill_schedule_drills[1].name"
    with pytest.raises(FieldError) as backend:
        check([GOOD], "at")
    assert backend.value.field == "drill_schedule_backend"
    with pytest.raises(FieldError) as not_a_list:
        check("weekly", "systemd")
    assert not_a_list.value.field == "drill_schedule_drills"


def test_a_systemd_calendar_is_left_to_systemd_analyze_but_must_be_one_line():
    assert check([dict(GOOD, when="daily")], "systemd")[0]["when"] == "daily"
    with pytest.raises(FieldError):
        check([dict(GOOD, when="daily\nExecStart=/bin/sh")], "systemd")
