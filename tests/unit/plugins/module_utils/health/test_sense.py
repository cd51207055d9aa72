"""gpu_health's input checks and the kernel-log-only path of judge_node (no NVML needed)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import judge_node, parse_since

XID79 = "[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(kernel_log=42, use_nvml=False), "kernel_log"),
    (dict(wait_for_xid=-1, use_nvml=False), "wait_for_xid"),
    (dict(wait_for_xid=5, use_nvml=False), "wait_for_xid"),
    (dict(since="yesterday-ish", use_nvml=False), "since"),
    (dict(thresholds={"window_s": 0}, use_nvml=False), "window_s"),
    (dict(thresholds={"windw_s": 10}, use_nvml=False), "thresholds.windw_s"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(HealthError, match=field):
        judge_node(**kwargs)


def test_kernel_log_alone_gives_a_verdict():
    result = judge_node(kernel_log=[XID79, "unrelated line"], use_nvml=False)
    assert result["verdict"] == "fatal" and result["action"] == "RESTART_BM"
    assert result["faults"][0]["pci_bus_id"] == "0000:3b:00.0"
    assert result["gpus"] == [] and result["events"] == 1


def test_kernel_log_from_a_file(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("Nov 29 03:12:01 gpu-a-003 kernel: " + XID79.split("] ", 1)[1] + "\n")
    assert judge_node(kernel_log=str(log), use_nvml=False)["verdict"] == "fatal"
    with pytest.raises(HealthError, match="kernel_log: cannot read"):
        judge_node(kernel_log=str(tmp_path / "missing.log"), use_nvml=False)


def test_since_accepts_epoch_and_iso():
    assert parse_since("1795900000") == 1795900000.0
    assert parse_since("2026-11-29T03:00:00Z") == parse_since("2026-11-29T03:00:00+00:00")
    assert parse_since(None) is None and parse_since("") is None
