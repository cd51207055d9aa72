# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The GpuHealthy codec: every fault survives the condition, people still read its first line,
and the event source's stand-alone copy decodes exactly what the codec decodes."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.condition import (
    health_condition,
    unknown_condition,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.status import agent_verdict
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.gpu_condition import NodeFault, decode, encode
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import ACTION_ORDER, XidEvent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.fault import fault_from_condition

PLUGIN = Path(__file__).resolve().parents[5] / "extensions" / "eda" / "plugins" / "event_source" / "node_condition.py"
T0 = 1_795_000_000.0


def _load_source():
    spec = importlib.util.spec_from_file_location("gpufleet_node_condition_source_codec", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


source = _load_source()

# Text as the agent may write it: any printable text, line breaks and all (the codec keeps the
# people's part on one line).
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)
unhealthy_faults = st.builds(
    NodeFault,
    verdict=st.sampled_from(["fatal", "degraded"]),
    action=st.sampled_from(ACTION_ORDER),
    reason=st.from_regex(r"[A-Z][A-Za-z0-9]{0,20}", fullmatch=True),
    summary=text,
    xids=st.lists(st.integers(0, 300), max_size=5, unique=True).map(tuple),
    gpu_index=st.none() | st.integers(0, 63),
    gpu_uuid=st.none() | st.from_regex(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}", fullmatch=True),
    pci_bus_id=st.none() | st.from_regex(r"0000:[0-9a-f]{2}:00\.0", fullmatch=True),
)


def one_line(value: str) -> str:
    return " ".join(value.split())


@settings(max_examples=400, deadline=None)
@given(fault=unhealthy_faults)
def test_every_unhealthy_fault_comes_back_from_its_condition(fault):
    condition = encode(fault)
    assert condition["type"] == "GpuHealthy" and condition["status"] == "False"
    # Everything comes back; the summary as people see it, on one line.
    assert decode(condition) == replace(fault, summary=one_line(fault.summary))
    first, data = condition["message"].split("\n")
    assert first == one_line("%s, %s: %s" % (fault.verdict, fault.action, fault.summary))
    assert data.startswith(gpu_condition.DATA_PREFIX)


@settings(max_examples=300, deadline=None)
@given(fault=unhealthy_faults)
def test_the_sources_copy_decodes_every_encoded_fault_as_the_codec_does(fault):
    condition = encode(fault)
    assert source.decode_fault(condition) == decode(condition).as_dict()


@settings(max_examples=300, deadline=None)
@given(message=st.text(max_size=120), status=st.sampled_from(["True", "False", "Unknown", None]),
       reason=st.none() | text)
def test_the_sources_copy_agrees_on_any_condition_at_all(message, status, reason):
    condition = {"type": "GpuHealthy", "status": status, "reason": reason, "message": message}
    original = decode(condition)
    expected = original.as_dict() if original is not None and original.unhealthy else None
    assert source.decode_fault(condition) == expected


def test_the_sources_copy_knows_the_same_actions_and_format():
    assert set(source.ACTIONS) == set(ACTION_ORDER) and source.DATA_PREFIX == gpu_condition.DATA_PREFIX
    assert source.FORMAT_VERSION == gpu_condition.FORMAT_VERSION
    assert source.CONDITION_TYPE == gpu_condition.CONDITION_TYPE


def test_the_agents_condition_carries_the_worst_faults_device_and_the_xids():
    verdict = evaluate([
        XidEvent(xid=79, source="nvml", gpu_index=3, gpu_uuid="GPU-3", pci_bus_id="0000:3b:00.0", timestamp=T0),
        XidEvent(xid=48, source="nvml", gpu_index=1, gpu_uuid="GPU-1", pci_bus_id="0000:1b:00.0", timestamp=T0 + 1),
    ])
    condition = health_condition(verdict, 8)
    first, data = condition.message.split("\n")
    assert first == "fatal, RESTART_BM: " + one_line(verdict.reason)  # what people read, as before
    assert json.loads(data[len(gpu_condition.DATA_PREFIX):]) == {
        "v": 1, "verdict": "fatal", "action": "RESTART_BM", "xids": [79, 48], "gpu": 3, "uuid": "GPU-3",
        "pci": "0000:3b:00.0"}
    fault = fault_from_condition(condition.__dict__)
    assert (fault.verdict, fault.action, fault.reason, fault.xids, fault.gpu_index, fault.gpu_uuid) == (
        "fatal", "RESTART_BM", "Xid79", (79, 48), 3, "GPU-3")
    assert fault.message == first


def test_healthy_and_unknown_conditions_carry_no_fault():
    healthy = health_condition(evaluate([]), 8)
    assert (healthy.status, healthy.reason, healthy.message) == ("True", "GpusHealthy", "8 GPUs healthy")
    assert decode(healthy.__dict__).verdict == "healthy" and not decode(healthy.__dict__).unhealthy
    blind = unknown_condition("driver not loaded")
    assert (blind.status, blind.reason) == ("Unknown", "NvmlUnavailable")
    assert decode(blind.__dict__).verdict == "unknown"
    assert fault_from_condition(healthy.__dict__) is None and fault_from_condition(blind.__dict__) is None
    assert decode(None) is None


@pytest.mark.parametrize("condition, expected", [
    (None, None),
    ({"type": "GpuHealthy", "status": "True", "reason": "GpusHealthy", "message": "8 GPUs healthy"}, "healthy"),
    ({"type": "GpuHealthy", "status": "Unknown", "reason": "NvmlUnavailable", "message": "x"}, "unknown"),
    ({"type": "GpuHealthy", "status": "False", "reason": "Xid79", "message": "fatal, RESTART_BM: GPU 3"}, "fatal"),
    ({"type": "GpuHealthy", "status": "False", "reason": "Other", "message": "someone else's words"}, "unhealthy"),
])
def test_fleet_status_reads_the_verdict_through_the_codec(condition, expected):
    node = {"metadata": {"name": "n"}, "status": {"conditions": [condition] if condition else []}}
    assert agent_verdict(node)["agent"] == expected


def test_a_foreign_false_condition_is_acted_on_only_as_far_as_it_is_understood():
    fault = fault_from_condition({"type": "GpuHealthy", "status": "False", "reason": "Vendor", "message": "help"})
    assert (fault.verdict, fault.action, fault.reason) == ("degraded", "CONTACT_SUPPORT", "Vendor")


def test_a_bad_verdict_is_refused_by_the_encoder():
    with pytest.raises(ValueError, match="verdict"):
        encode(NodeFault("broken", "NONE", "X"))
