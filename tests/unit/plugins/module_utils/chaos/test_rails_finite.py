# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 5: NaN, infinity and negative numbers never pass the chaos rails.

NaN compares false to everything: ``duration=nan`` passed "<= 0" and "> cap" alike and its expiry
(now + nan) never came, so the watchdog never rolled the fault back; ``max_duration=nan`` lifted
the cap for every drill."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api, gate, ledger
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError

BAD = [float("nan"), float("inf"), float("-inf"), -5.0, 0]


def node(name="n1"):
    return {"name": name, "labels": {gate.OPT_IN_LABEL: gate.OPT_IN_VALUE}, "pool": "gpu-a"}


@pytest.mark.parametrize("duration", BAD, ids=repr)
def test_a_duration_that_is_not_a_positive_finite_number_is_refused(duration) -> None:
    refused = gate.refusals([node()], {"gpu-a": 8}, gate.Rails(), duration)
    assert [r["field"] for r in refused] == ["duration"]


@pytest.mark.parametrize("limit", BAD, ids=repr)
def test_a_cap_that_is_not_a_positive_finite_number_is_refused(limit) -> None:
    with pytest.raises(FieldError) as bad:
        gate.Rails.from_dict({}, limit)
    assert bad.value.field == "max_duration"


@pytest.mark.parametrize("percent", [float("nan"), float("inf"), -1, 0, 101], ids=repr)
def test_a_blast_radius_percent_that_is_not_finite_is_refused(percent) -> None:
    with pytest.raises(FieldError) as bad:
        gate.Rails.from_dict({"max_percent": percent})
    assert bad.value.field == "blast_radius.max_percent"


def _ledger(params):
    return ledger.FileStore(params["ledger_file"]).read()[0]


@pytest.mark.parametrize("option,value", [("duration", math.nan), ("duration", math.inf), ("duration", -1.0),
                                          ("max_duration", math.nan), ("max_duration", math.inf)], ids=repr)
def test_the_gate_refuses_before_it_registers_a_drill(bare_metal, option, value) -> None:
    params = dict(bare_metal, **{option: value})
    if option == "max_duration":
        params["duration"] = 10 ** 9  # over any real cap: nan or inf as the cap must not let it through
    with pytest.raises(GpufleetError) as refused:  # FieldError, or DrillRefused naming the field
        api.drill_gate(params, False)
    assert refused.value.field in ("duration", "max_duration")
    assert not ledger.drills(_ledger(params))


@pytest.mark.parametrize("duration", [math.nan, math.inf, -1.0, 10 ** 6], ids=repr)
def test_an_injection_never_gets_an_expiry_the_watchdog_cannot_reach(bare_metal, duration) -> None:
    drill = api.drill_gate(bare_metal, False)["drill"]
    with pytest.raises(FieldError) as bad:
        api.inject(dict(bare_metal, drill=drill, duration=duration), False)
    assert bad.value.field == "duration"
    assert not ledger.faults(_ledger(bare_metal))
