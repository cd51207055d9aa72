# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's window: the same verdicts as gpu_health, health events, duplicates, clearing."""
from __future__ import annotations

from dataclasses import replace

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.condition import (
    health_condition,
    unknown_condition,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.node_state import (
    NodeState,
    fault_reason,
    verdict_reason,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuInfo,
    GpuSnapshot,
    Thresholds,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate

T0 = 1_795_000_000.0
UUIDS = ["GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd" % i for i in range(2)]
PCI = ["0000:1b:00.0", "0000:2d:00.0"]
INVENTORY = [GpuInfo(index=i, uuid=UUIDS[i], name="NVIDIA H100", pci_bus_id=PCI[i], serial=None,
                     driver_version="580.95.05") for i in range(2)]
HEALTHY = [GpuSnapshot(index=i, uuid=UUIDS[i], pci_bus_id=PCI[i], temperature_c=40) for i in range(2)]


def state(**thresholds):
    node = NodeState("gpu-a-001", Thresholds(**thresholds))
    node.set_inventory(INVENTORY, "580.95.05")
    node.set_snapshots(HEALTHY, T0)
    return node


def nvml(xid, gpu=0, at=T0):
    return XidEvent(xid=xid, source="nvml", gpu_index=gpu, gpu_uuid=UUIDS[gpu], pci_bus_id=PCI[gpu], timestamp=at)


def kmsg(xid, gpu=0, at=None, message=""):
    return XidEvent(xid=xid, source="kernel_log", pci_bus_id=PCI[gpu], timestamp=at, message=message,
                    raw="NVRM: Xid (PCI:%s): %d, %s" % (PCI[gpu], xid, message))


def test_xid79_is_fatal_with_one_event_naming_the_gpu():
    node = state()
    records = node.add_events([nvml(79, gpu=1)], T0)
    assert node.verdict.state == "fatal" and node.verdict.action == "RESTART_BM"
    assert [(r.event, r.reason, r.fault["gpu_index"], r.fault["action"]) for r in records] == [
        ("fault", "Xid79", 1, "RESTART_BM")]
    assert node.gpu_states() == {0: "healthy", 1: "fatal"}
    condition = health_condition(node.verdict, 2)
    assert (condition.type, condition.status, condition.reason) == ("GpuHealthy", "False", "Xid79")
    assert condition.message.startswith("fatal, RESTART_BM: GPU 1 (%s, %s)" % (UUIDS[1], PCI[1]))


def test_kernel_log_events_get_their_gpu_from_the_inventory_and_a_stamp():
    node = state()
    records = node.add_events([kmsg(48, gpu=1)], T0 + 5)
    assert records[0].fault["gpu_index"] == 1 and records[0].fault["gpu_uuid"] == UUIDS[1]
    assert node.events[-1].timestamp == T0 + 5
    assert records[0].raw.startswith("NVRM: Xid")


def test_xid45_alone_vs_with_79_follows_gpu_health():
    alone = state()
    alone.add_events([nvml(45)], T0)
    assert alone.verdict.state == evaluate([nvml(45)], HEALTHY, now=T0).state
    together = state()
    together.add_events([nvml(45), nvml(79)], T0)
    expected = evaluate([nvml(45), nvml(79)], HEALTHY, now=T0)
    assert (together.verdict.state, together.verdict.action) == (expected.state, expected.action) == (
        "fatal", "RESTART_BM")
    xid45 = [f for f in together.verdict.faults if f.xid == 45]
    assert xid45 and not xid45[0].effective


def test_repeats_escalate_by_the_gpu_health_thresholds():
    node = state(app_repeat_escalation_count=3, burst_s=1.0)
    states = []
    for second in range(3):
        records = node.add_events([nvml(13, at=T0 + 10 * second)], T0 + 10 * second)
        states.append((node.verdict.state, records[0].fault["action"], records[0].fault["escalated"]))
    events = [nvml(13, at=T0 + 10 * s) for s in range(3)]
    reference = evaluate(events, HEALTHY, thresholds=Thresholds(app_repeat_escalation_count=3, burst_s=1.0),
                         now=T0 + 20)
    assert states[-1][1] == next(f for f in reference.faults if f.xid == 13).action
    assert states[0][2] is False and states[-1][2] is True


def test_the_same_xid_from_nvml_and_the_kernel_log_is_counted_once():
    node = state()
    first = node.add_events([nvml(79)], T0)
    second = node.add_events([kmsg(79, at=T0 + 0.2)], T0 + 0.2)
    assert len(first) == 1 and second == []
    assert sum(node.xid_counts.values()) == 1
    later = node.add_events([kmsg(79, at=T0 + 60)], T0 + 60)
    assert len(later) == 1


def test_counter_faults_appear_and_clear():
    node = state()
    hot = [replace(HEALTHY[0], ecc_dbe_volatile=1), HEALTHY[1]]
    records = node.set_snapshots(hot, T0 + 1)
    assert [(r.event, r.reason) for r in records] == [("fault", "EccDoubleBit")]
    assert node.verdict.state == "fatal"
    assert node.set_snapshots(hot, T0 + 2) == []  # still there: no new event
    records = node.set_snapshots(HEALTHY, T0 + 3)
    assert [(r.event, r.reason) for r in records] == [("cleared", "EccDoubleBit")]
    assert node.verdict.state == "healthy"
    assert health_condition(node.verdict, 2).status == "True"


def test_lost_gpu_and_over_temperature_reasons():
    node = state()
    node.set_snapshots([GpuSnapshot(index=0, uuid=UUIDS[0], lost=True), HEALTHY[1]], T0)
    assert verdict_reason(node.verdict) == "GpuLost" and node.verdict.state == "fatal"
    node.set_snapshots([replace(HEALTHY[0], temperature_c=95, throttle_reasons=0x40), HEALTHY[1]], T0 + 1)
    assert node.verdict.state == "degraded"
    assert {fault_reason(f) for f in node.verdict.faults} == {"ThermalThrottle", "OverTemperature"}
    assert health_condition(node.verdict, 2).message.startswith("degraded, CONTACT_SUPPORT:")


def test_xid_faults_leave_with_the_window_or_when_forgotten():
    node = state(window_s=600.0)
    node.add_events([nvml(79, at=T0)], T0)
    assert node.tick(T0 + 300) is False and node.verdict.state == "fatal"
    assert node.tick(T0 + 601) is True and node.verdict.state == "healthy"
    node.add_events([nvml(79, at=T0 + 700)], T0 + 700)
    node.forget_xids(T0 + 701)
    assert node.verdict.state == "healthy"


def test_unknown_condition():
    condition = unknown_condition("libnvidia-ml.so.1 not found")
    assert (condition.status, condition.reason) == ("Unknown", "NvmlUnavailable")
    assert "libnvidia-ml.so.1" in condition.message


def test_sxid_reason():
    node = state()
    node.add_events([XidEvent(xid=12028, source="kernel_log", kind="sxid", pci_bus_id="0000:05:00.0",
                              message="Non-fatal, Link 32 egress non-posted PRIV error")], T0)
    assert verdict_reason(node.verdict) == "SXid12028"
