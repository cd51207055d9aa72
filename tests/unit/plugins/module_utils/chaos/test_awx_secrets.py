# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 10: the AWX plan's errors name the field, never a webhook's URL or header value."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.awx_drills import plan
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

SECRET = "tok-5e1f"
DRILL = {"name": "xid", "experiment": "gpu_xid", "target": "gpu-a-001",
         "rrule": "DTSTART:20270101T010000Z RRULE:FREQ=DAILY"}


@pytest.mark.parametrize(("hook", "field"), [
    ({"name": "h", "url": "https://hooks.example.org/%s\nX: 1" % SECRET}, "awx_drills_notifications[0].url"),
    ({"name": "h", "url": "ftp://hooks.example.org/%s" % SECRET}, "awx_drills_notifications[0].url"),
    ({"name": "h", "url": "https://h.example.org/", "headers": {"Authorization": "Bearer %s\r\nX: 1" % SECRET}},
     "awx_drills_notifications[0].headers.Authorization"),
    ({"name": "h", "url": "https://h.example.org/", "headers": {"Bad Header": SECRET}},
     "awx_drills_notifications[0].headers"),
    (["https://h.example.org/%s" % SECRET], "awx_drills_notifications[0]"),
])
def test_a_bad_webhook_is_named_and_its_secret_not_shown(hook, field) -> None:
    with pytest.raises(FieldError) as bad:
        plan([DRILL], [hook])
    assert bad.value.field == field
    assert SECRET not in str(bad.value)


@pytest.mark.parametrize("target", ["gpu-a-001\n* * * * * root id", "-oProxyCommand=x", ""])
def test_a_drill_target_goes_through_the_strict_layer(target) -> None:
    with pytest.raises(FieldError) as bad:
        plan([dict(DRILL, target=target)], [])
    assert bad.value.field == "awx_drills_drills[0].target"
