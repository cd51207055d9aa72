# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import parse_kernel_log
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuSnapshot,
    Thresholds,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate, in_window
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import CATALOG_VERSION

T0 = 1_795_000_000.0
UUID = "GPU-3f1c2a9e-0b7d-4c61-9a55-2f0e8f6b1d01"
GPU3 = GpuSnapshot(index=3, uuid=UUID, pci_bus_id="0000:3b:00.0", temperature_c=55)


def event(xid, pci="0000:3b:00.0", timestamp=None, message="", **extra):
    return XidEvent(xid=xid, source="kernel_log", pci_bus_id=pci, timestamp=timestamp, message=message, **extra)


def test_no_evidence_is_healthy_with_no_action():
    verdict = evaluate()
    assert (verdict.state, verdict.action, verdict.faults) == ("healthy", "NONE", ())
    assert verdict.reason == "healthy: no GPU fault"
    assert verdict.catalog_version == CATALOG_VERSION
    assert evaluate(snapshots=[GPU3]).state == "healthy"


def test_only_ignored_faults_are_healthy_but_listed():
    verdict = evaluate([event(43), event(63)])
    assert (verdict.state, verdict.action) == ("healthy", "IGNORE")
    assert [fault.xid for fault in verdict.faults] == [43, 63]
    assert "XID 43" in verdict.reason and "XID 63" in verdict.reason


def test_fallen_off_the_bus_names_the_gpu_in_the_reason():
    log = [
        "[ 812.204411] NVRM: GPU at PCI:0000:3b:00: " + UUID,
        "[ 9921.118230] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    ]
    verdict = evaluate(parse_kernel_log(log), snapshots=[GPU3])
    assert (verdict.state, verdict.action) == ("fatal", "RESTART_BM")
    assert verdict.reason == "GPU 3 (%s, 0000:3b:00.0): XID 79 GPU has fallen off the bus -> RESTART_BM" % UUID
    assert verdict.faults[0].gpu_index == 3


def test_worst_state_and_most_severe_action_win():
    verdict = evaluate(
        [event(13, pci="0000:5b:00.0"), event(48, pci="0000:3b:00.0"), event(999, pci="0000:9b:00.0")],
        snapshots=[GpuSnapshot(index=0, pci_bus_id="0000:1b:00.0", temperature_c=95)],
    )
    assert verdict.state == "fatal"
    assert verdict.action == "RESET_GPU"  # fatal first: beats the non-fatal CONTACT_SUPPORT faults
    assert verdict.faults[0].xid == 48
    assert [f.severity for f in verdict.faults[:1]] == ["fatal"]


def test_degraded_takes_the_most_severe_non_fatal_action():
    verdict = evaluate([event(13)], snapshots=[GpuSnapshot(index=1, pci_bus_id="0000:5b:00.0",
                                                           remapped_rows_pending=True)])
    assert (verdict.state, verdict.action) == ("degraded", "RESET_GPU")
    assert "[non-fatal]" in verdict.reason


def test_fatal_beats_a_more_disruptive_non_fatal_action():
    snapshots = [GpuSnapshot(index=0, pci_bus_id="0000:1b:00.0", remapped_rows_failed=True),  # fatal CONTACT_SUPPORT
                 GpuSnapshot(index=1, pci_bus_id="0000:5b:00.0", remapped_rows_pending=True)]  # non-fatal RESET_GPU
    verdict = evaluate(snapshots=snapshots)
    assert (verdict.state, verdict.action) == ("fatal", "CONTACT_SUPPORT")


def test_window_leaves_old_events_out():
    events = [event(79, timestamp=T0 - 7200), event(13, pci="0000:5b:00.0", timestamp=T0)]
    verdict = evaluate(events, now=T0)
    assert (verdict.state, verdict.action, verdict.events_considered) == ("degraded", "RESTART_APP", 1)
    assert evaluate(events, now=T0, thresholds=Thresholds(window_s=10_000)).state == "fatal"


def test_now_defaults_to_the_newest_stamp():
    events = [event(79, timestamp=T0 - 7200), event(13, pci="0000:5b:00.0", timestamp=T0)]
    verdict = evaluate(events)
    assert verdict.evaluated_at == T0 and verdict.state == "degraded"


def test_unstamped_events_are_always_in_the_window():
    events = [event(79), event(79, pci="0000:5b:00.0", uptime_s=12.5), event(13, timestamp=T0)]
    assert len(in_window(events, T0 + 1e9, 60)) == 2
    assert evaluate(events, now=T0 + 1e9).state == "fatal"


def test_repeat_escalation_counts_inside_the_window_only():
    events = [event(999, timestamp=T0 - 5000), event(999, timestamp=T0 - 600), event(999, timestamp=T0)]
    assert evaluate(events, now=T0).state == "degraded"  # two in the hour
    assert evaluate(events, now=T0, thresholds=Thresholds(window_s=6000)).state == "fatal"  # three
    assert evaluate(events, now=T0, thresholds=Thresholds(window_s=6000, repeat_escalation_count=4)).state == (
        "degraded")


def test_reset_escalation_threshold():
    events = [event(95, timestamp=T0 - 1200), event(95, timestamp=T0)]
    assert evaluate(events).action == "RESTART_BM"
    assert evaluate(events, thresholds=Thresholds(reset_escalation_count=3)).action == "RESET_GPU"


def test_one_job_crash_across_eight_gpus_is_not_fatal():
    # The peer's bug: repeated XID 45 treated as fatal flagged 77 nodes over 11 racks.
    events = [event(45, pci="0000:%02x:00.0" % (0x10 * gpu + 0xb), timestamp=T0 + 30 * n)
              for gpu in range(8) for n in range(6)]
    verdict = evaluate(events, thresholds=Thresholds(repeat_escalation_count=2))
    assert verdict.state == "degraded" and verdict.action == "RESTART_FM"
    assert all(fault.severity == "non-fatal" for fault in verdict.faults)


def test_reason_lists_the_worst_faults_and_counts_the_rest():
    events = [event(48, pci="0000:%02x:00.0" % bus) for bus in range(1, 8)]
    verdict = evaluate(events)
    assert verdict.reason.count("-> RESET_GPU") == 4 and verdict.reason.endswith("and 3 more")


def test_nvswitch_and_unattributed_faults_are_labelled():
    events = [XidEvent(xid=20034, source="kernel_log", kind="sxid", pci_bus_id="0000:05:00.0",
                       message="Fatal, Link 28 LTSSM Fault Up"),
              XidEvent(xid=79, source="nvml", kind="fallen_off_bus", message="NVML_ERROR_GPU_IS_LOST")]
    reason = evaluate(events).reason
    assert "NVSwitch 0000:05:00.0: SXID 20034" in reason
    assert "node (GPU not identified): XID 79" in reason


def test_verdict_to_dict_is_json_and_matches_the_module_contract():
    verdict = evaluate([event(48, timestamp=T0), event(63, timestamp=T0), event(45, timestamp=T0)], snapshots=[GPU3])
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["verdict"] == data["state"] == "fatal"
    assert data["action"] == "DRAIN_AND_RESET"
    keys = {"xid", "gpu_index", "gpu_uuid", "pci_bus_id", "name", "severity", "action", "message", "source"}
    assert all(keys <= set(fault) for fault in data["faults"])
    ignored = [fault for fault in data["faults"] if not fault["effective"]]
    assert sorted(fault["xid"] for fault in ignored) == [45, 63]


def test_invalid_thresholds_fail_naming_the_field():
    thresholds = Thresholds()
    object.__setattr__(thresholds, "repeat_escalation_count", 0)
    with pytest.raises(ValueError, match="repeat_escalation_count"):
        evaluate([event(79)], thresholds=thresholds)
