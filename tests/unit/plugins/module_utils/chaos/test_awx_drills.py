"""The AWX drills plan: every bad field named before any API call; the survey and schedule answers."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.awx_drills import check_rrule, plan
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

RRULE = "DTSTART;TZID=Europe/Berlin:20270104T030000 RRULE:FREQ=WEEKLY;BYDAY=MO"
HOOK = {"name": "ops", "url": "https://hooks.example.org/drills"}


def drill(**changes):
    return dict({"name": "xid79", "experiment": "gpu_xid", "target": "gpu-a-003", "dry_run": False, "rrule": RRULE},
                **changes)


def test_plan_builds_survey_schedule_answers_and_names():
    planned = plan([drill(dry_run="true", params={"xid": 79})], [HOOK])
    one = planned["drills"][0]
    assert (one["template_name"], one["schedule_name"], one["notify"]) == (
        "gpufleet drill: xid79", "gpufleet drill: xid79", ["gpufleet drill: ops"])
    assert one["extra_data"] == {"target": "gpu-a-003", "experiment": "gpu_xid", "dry_run": "true"}
    questions = {q["variable"]: q for q in one["survey_spec"]["spec"]}
    assert questions["experiment"]["choices"] == experiments.names()
    assert questions["dry_run"]["default"] == "true" and questions["target"]["default"] == "gpu-a-003"
    assert planned["notifications"][0]["configuration"] == {
        "url": HOOK["url"], "http_method": "POST", "headers": {"Content-Type": "application/json"},
        "disable_ssl_verification": False, "username": "", "password": ""}


def test_notify_defaults_to_every_notification_and_can_be_none():
    planned = plan([drill(), drill(name="quiet", notify=[])], [HOOK, dict(HOOK, name="chat")])
    assert planned["drills"][0]["notify"] == ["gpufleet drill: chat", "gpufleet drill: ops"]
    assert planned["drills"][1]["notify"] == []


@pytest.mark.parametrize("changes, field", [
    ({"experiment": "gpu_zap"}, "awx_drills_drills[0].experiment"),
    ({"rrule": "RRULE:FREQ=DAILY"}, "awx_drills_drills[0].rrule"),
    ({"rrule": "DTSTART:20270101T010000 RRULE:FREQ=DAILY"}, "awx_drills_drills[0].rrule"),
    ({"rrule": "DTSTART:20270101T010000Z"}, "awx_drills_drills[0].rrule"),
    ({"rrule": "DTSTART:20270101T010000Z RRULE:FREQ=SECONDLY"}, "awx_drills_drills[0].rrule"),
    ({"rrule": "DTSTART:20270101T010000Z RRULE:FREQ=DAILY;COUNT=1000"}, "awx_drills_drills[0].rrule"),
    ({"target": ""}, "awx_drills_drills[0].target"),
    ({"dry_run": "maybe"}, "awx_drills_drills[0].dry_run"),
    ({"name": "a/b"}, "awx_drills_drills[0].name"),
    ({"notify": ["pager"]}, "awx_drills_drills[0].notify[0]"),
    ({"schedule": "weekly"}, "awx_drills_drills[0].schedule"),
])
def test_bad_drill_names_its_field(changes, field):
    with pytest.raises(FieldError) as raised:
        plan([drill(**changes)], [HOOK])
    assert raised.value.field == field


def test_every_bad_drill_is_named_at_once():
    with pytest.raises(FieldError) as raised:
        plan([drill(rrule="RRULE:FREQ=DAILY"), drill(name="b", experiment="gpu_zap"), drill(name="b")], [])
    text = str(raised.value)
    assert raised.value.field == "awx_drills_drills[0].rrule"
    assert "awx_drills_drills[1].experiment" in text
    assert "awx_drills_drills[2].name" not in text  # drill 1 was refused, so the name b is not taken twice


@pytest.mark.parametrize("hook, field", [
    ({"name": "ops", "url": "ftp://x"}, "awx_drills_notifications[0].url"),
    ({"name": "ops", "url": "https://x", "http_method": "GET"}, "awx_drills_notifications[0].http_method"),
    ({"name": "ops", "url": "https://x", "headers": {"X": 1}}, "awx_drills_notifications[0].headers"),
    ({"url": "https://x"}, "awx_drills_notifications[0].name"),
])
def test_bad_notification_names_its_field(hook, field):
    with pytest.raises(FieldError) as raised:
        plan([drill()], [hook])
    assert raised.value.field == field


def test_duplicate_names_are_refused():
    with pytest.raises(FieldError, match=r"awx_drills_drills\[1\].name"):
        plan([drill(), drill()], [])
    with pytest.raises(FieldError, match="awx_drills_notifications"):
        plan([drill()], [HOOK, HOOK])


def test_rrule_is_normalised_and_exrule_allowed():
    assert check_rrule("f", "DTSTART:20270101T010000Z  RRULE:FREQ=DAILY EXRULE:FREQ=WEEKLY;BYDAY=SU") == (
        "DTSTART:20270101T010000Z RRULE:FREQ=DAILY EXRULE:FREQ=WEEKLY;BYDAY=SU")
