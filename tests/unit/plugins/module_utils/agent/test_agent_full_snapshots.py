# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What the agent reads each second: full snapshots every FULL_EVERY and after an XID, and the
verdict judged again only when what it reads has changed."""

from __future__ import annotations

from dataclasses import replace

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent import node_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import (
    AgentConfig,
    KernelLogConfig,
    KubernetesConfig,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.loop import FULL_EVERY, Agent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuInfo,
    GpuSnapshot,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import build_thresholds

UUID = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"


class RecordingReader:
    """What the agent asks of ``NvmlReader``; records whether each snapshot was a full one."""

    def __init__(self):
        self.reads = []
        self.temperature = 40

    def open(self):
        return self

    def inventory(self):
        return [GpuInfo(index=0, uuid=UUID, name="NVIDIA H100", pci_bus_id="0000:1b:00.0", serial=None,
                        driver_version="580.95.05")]

    @staticmethod
    def driver_version():
        return "580.95.05"

    def watch_xids(self):
        return None

    def snapshot(self, full=True):
        self.reads.append(full)
        return [GpuSnapshot(index=0, uuid=UUID, pci_bus_id="0000:1b:00.0", temperature_c=self.temperature)]

    def close(self):
        return None


def agent(tmp_path, reader):
    config = AgentConfig(node="gpu-a-001", kernel_log=KernelLogConfig(source="none"),
                         kubernetes=KubernetesConfig(enabled=False), journal=str(tmp_path / "events.jsonl"))
    started = Agent(config, reader_factory=lambda _path: reader, clock=lambda: 1_795_000_000.0,
                    boot_id=lambda: "boot")
    started._open_nvml()
    started.restore()
    return started


def test_the_first_snapshot_every_full_every_and_the_one_after_an_xid_are_full(tmp_path):
    reader = RecordingReader()
    running = agent(tmp_path, reader)
    for _tick in range(FULL_EVERY + 1):
        running._snapshot(0.0)
    assert reader.reads == [True] + [False] * (FULL_EVERY - 1) + [True]

    running._handle(("xid", [XidEvent(xid=74, source="nvml", gpu_index=0, gpu_uuid=UUID)], "nvml"))
    running._snapshot(0.0)
    running._snapshot(0.0)
    assert reader.reads[-2:] == [True, False]


def test_a_steady_node_is_not_judged_again_and_any_change_is(tmp_path, monkeypatch):
    judged = []
    real = node_state.evaluate
    monkeypatch.setattr(node_state, "evaluate", lambda **kwargs: judged.append(1) or real(**kwargs))
    reader = RecordingReader()
    running = agent(tmp_path, reader)
    running._snapshot(0.0)
    before = len(judged)
    for _tick in range(5):
        running._snapshot(0.0)
    assert len(judged) == before  # the same snapshot, events and thresholds: the same verdict

    reader.temperature = 120  # a new reading: judged again, and it counts
    running._snapshot(0.0)
    assert len(judged) == before + 1 and running.state.verdict.state == "degraded"

    # New thresholds (SIGHUP) with the same reading: judged again under them.
    running.state.thresholds = replace(build_thresholds({}), temperature_max_c=130)
    running._snapshot(0.0)
    assert len(judged) == before + 2 and running.state.verdict.state == "healthy"

    # An XID is an input too.
    running._handle(("xid", [XidEvent(xid=79, source="nvml", gpu_index=0, gpu_uuid=UUID)], "nvml"))
    assert running.state.verdict.state == "fatal"
