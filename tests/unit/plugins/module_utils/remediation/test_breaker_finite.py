# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 5: ``remediation_breaker.window_s=nan`` switched the breaker off.

A slot is in the window when ``at > now - window_s``; with NaN no slot ever is, so with
``max_nodes: 1`` four remediations in a row were all granted. Every number of the policy is
finite now, and a bad one fails naming the setting before any API call."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import api
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.breaker import (
    BreakerPolicy,
    BreakerState,
    take_slot,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.escalation import EscalationPolicy

BAD = [math.nan, math.inf, -math.inf, -1.0, 0.0, "nan", True]


@pytest.mark.parametrize("setting", ["window_s", "max_percent"])
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_breaker_number_that_is_not_finite_and_positive_is_refused(setting, value) -> None:
    with pytest.raises(FieldError) as bad:
        BreakerPolicy.from_dict({setting: value, "max_nodes": 1})
    assert bad.value.field == "remediation_breaker." + setting


@pytest.mark.parametrize("value", [math.nan, math.inf, -2.0, 0])
def test_an_escalation_window_that_is_not_finite_is_refused(value) -> None:
    with pytest.raises(FieldError) as bad:
        EscalationPolicy.from_dict({"window_days": value})
    assert bad.value.field == "remediation_escalation.window_days"


def test_with_a_good_policy_the_second_of_four_is_refused() -> None:
    policy = BreakerPolicy.from_dict({"window_s": 600, "max_nodes": 1, "max_percent": 100})
    state, granted = BreakerState(), []
    for index in range(4):
        state, decision = take_slot(state, "gpu-a-%03d" % index, "r-%d" % index, 1000.0 + index, 8, policy)
        granted.append(decision.granted)
    assert granted == [True, False, False, False]


class CountingCore:
    """Counts every call: none may happen when the input is bad."""

    def __init__(self) -> None:
        self.calls = []

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append(name)
            raise AssertionError("API call %s with bad input" % name)
        return call


@pytest.mark.parametrize("params,field", [
    ({"node": "gpu-a-001", "breaker": {"window_s": math.nan, "max_nodes": 1}}, "remediation_breaker.window_s"),
    ({"node": "gpu-a-001", "lease": math.nan}, "lease"),
    ({"node": "gpu-a-001", "lease": -1.0}, "lease"),
    ({"node": ""}, "node"),
    ({"node": "breaker\n"}, "node"),
    ({"node": "x" * 5000}, "node"),
])
def test_remediation_start_refuses_before_any_api_call(monkeypatch, params, field) -> None:
    core = CountingCore()
    monkeypatch.setattr(api, "core_v1_for", lambda *args: core)
    with pytest.raises(FieldError) as bad:
        api.start(params, False, now=1000.0)
    assert bad.value.field == field
    assert core.calls == []
