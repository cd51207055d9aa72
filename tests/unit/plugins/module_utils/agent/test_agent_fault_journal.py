# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A restarted agent does not forget faults: the fault journal, its clearing rules, its writes.

The agent runs here without its threads: NVML is a fake reader, and each "restart" is a new
``Agent`` on the same configuration (the same journal path), as a process restart would be.
"""
from __future__ import annotations

import json
import logging
import os
import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent import fault_journal
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import (
    AgentConfig,
    KernelLogConfig,
    KubernetesConfig,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.kernel_log_source import (
    FileFollower,
    kmsg_seq,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.loop import FAULT_JOURNAL_MIN_S, Agent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    GpuInfo,
    GpuSnapshot,
    XidEvent,
)

T0 = 1_795_000_000.0
BOOT = "6f1c1a1e-0d7b-4c55-9d0e-0a1b2c3d4e5f"
UUIDS = ["GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd" % i for i in range(2)]
PCI = ["0000:1b:00.0", "0000:2d:00.0"]


class FakeReader:
    """What the agent asks of ``NvmlReader``, with a settable inventory."""

    def __init__(self, uuids):
        self.uuids = list(uuids)

    def open(self):
        return self

    def inventory(self):
        return [GpuInfo(index=i, uuid=uuid, name="NVIDIA H100", pci_bus_id=PCI[i], serial=None,
                        driver_version="580.95.05") for i, uuid in enumerate(self.uuids)]

    @staticmethod
    def driver_version():
        return "580.95.05"

    def watch_xids(self):
        return None

    def snapshot(self, full=True):
        return [GpuSnapshot(index=i, uuid=uuid, pci_bus_id=PCI[i], temperature_c=40)
                for i, uuid in enumerate(self.uuids)]

    def close(self):
        return None


class Node:
    """One node's agent, restartable: the clock, the boot and the GPUs are the test's to set."""

    def __init__(self, tmp_path):
        self.now = T0
        self.boot = BOOT
        self.uuids = list(UUIDS)
        self.config = AgentConfig(node="gpu-a-001", kernel_log=KernelLogConfig(source="none"),
                                  kubernetes=KubernetesConfig(enabled=False),
                                  journal=str(tmp_path / "gpu-a-001.events.jsonl"))
        self.agent = None

    @property
    def state_file(self):
        return fault_journal.state_path(self.config.journal)

    def start(self):
        """What ``Agent.run`` does before its threads: open NVML, restore, judge once."""
        self.agent = Agent(self.config, reader_factory=lambda _path: FakeReader(self.uuids),
                           clock=lambda: self.now, boot_id=lambda: self.boot)
        self.agent._open_nvml()
        self.agent.restore()
        self.agent._snapshot(0.0)
        return self.agent

    def xid(self, xid, gpu=0, tick=True):
        """An NVML XID event, then (``tick``) the next snapshot, which writes what a write within
        ``FAULT_JOURNAL_MIN_S`` of the last one left for it."""
        event = XidEvent(xid=xid, source="nvml", gpu_index=gpu, gpu_uuid=UUIDS[gpu], pci_bus_id=PCI[gpu])
        self.agent._handle(("xid", [event], "nvml"))
        if tick:
            self.agent._snapshot(0.0)

    @property
    def verdict(self):
        return self.agent.state.verdict

    def journal(self, event):
        with open(self.config.journal) as handle:
            return [record for record in map(json.loads, handle) if record["event"] == event]


@pytest.fixture()
def node(tmp_path):
    return Node(tmp_path)


def test_a_restart_in_the_same_boot_keeps_an_unresolved_xid(node):
    node.start()
    node.xid(48, gpu=1)
    assert node.verdict.state == "fatal"
    node.now += 600  # restarted ten minutes later: an upgrade, an OOM kill, a rollout
    node.start()
    assert node.verdict.state == "fatal" and "GPU 1" in node.verdict.reason and "XID 48" in node.verdict.reason
    restored = node.journal("restored")
    assert restored[-1]["restored"] == 1 and restored[-1]["reason"] == "restart"
    # Not news: no second fault record, no second count.
    assert len(node.journal("fault")) == 1 and not node.agent.state.xid_counts


def test_sigusr1_clears_the_faults_for_the_next_run_too(node):
    node.start()
    node.xid(95)
    node.agent._forget()
    assert node.verdict.state == "healthy"
    node.start()
    assert node.verdict.state == "healthy" and not node.agent.state.events


def test_a_new_boot_clears_the_faults(node):
    node.start()
    node.xid(119)
    node.boot = "0b0e0e0e-1111-2222-3333-444444444444"
    node.start()
    assert node.verdict.state == "healthy"
    assert node.journal("restored")[-1]["reason"] == "new boot"
    # ... and the fault journal now belongs to the new boot.
    assert fault_journal.read(node.state_file)["boot_id"] == node.boot


def test_no_boot_id_restores_nothing(node):
    node.start()
    node.xid(48)
    node.boot = None
    node.start()
    assert node.verdict.state == "healthy"


def test_a_replaced_gpu_loses_its_faults_and_the_others_keep_theirs(node):
    node.start()
    node.xid(48, gpu=0)
    node.xid(79, gpu=1)
    node.uuids[0] = "GPU-99999999-aaaa-bbbb-cccc-dddddddddddd"  # a new board at 0000:1b:00.0
    node.start()
    assert node.verdict.state == "fatal"
    assert [event.gpu_index for event in node.agent.state.events] == [1]
    assert "XID 48" not in node.verdict.reason
    assert node.journal("restored")[-1]["dropped"] == {"gpu_replaced": 1}


def test_faults_past_the_window_are_not_restored(node):
    node.start()
    node.xid(48)
    node.now += node.agent.state.thresholds.window_s + 1
    node.start()
    assert node.verdict.state == "healthy"
    assert node.journal("restored")[-1]["dropped"] == {"expired": 1}


@pytest.mark.parametrize("content", [
    b"{\"version\": 1, \"node\": \"gpu-a-001\", \"events\": [{\"xid\": 4",  # cut off mid-write
    b"\x00\x00\x00\x00",
    b"[]",
    json.dumps({"version": 1, "node": "gpu-a-001", "boot_id": BOOT, "events": [{"xid": "48"}]}).encode(),
])
def test_a_corrupt_fault_journal_is_logged_and_ignored(node, content, caplog):
    with open(node.state_file, "wb") as handle:
        handle.write(content)
    with caplog.at_level(logging.WARNING, logger="gpufleet.agent"):
        agent = node.start()
    assert node.verdict.state == "healthy"
    assert agent.view.errors == {"journal": 1}
    assert any(node.state_file in record.getMessage() for record in caplog.records)
    # Replaced by a good one at once.
    assert fault_journal.read(node.state_file)["events"] == []


def test_an_unreadable_fault_journal_is_ignored(node):
    os.mkdir(node.state_file)  # read() fails with EISDIR: not FileNotFoundError
    agent = Agent(node.config, reader_factory=lambda _path: FakeReader(UUIDS), clock=lambda: T0,
                  boot_id=lambda: BOOT)
    agent._open_nvml()
    agent.restore()  # and the write that follows fails too: counted, not raised
    assert agent.view.errors["journal"] == 2
    agent._snapshot(0.0)  # the next tick does not retry (and count) at once: it backs off
    assert agent.view.errors["journal"] == 2 and agent._fault_journal_dirty


def test_the_fault_journal_is_bounded(node):
    events = [XidEvent(xid=13, source="kernel_log", gpu_index=0, timestamp=T0 + i, raw="x" * 5000,
                       message="m" * 5000) for i in range(fault_journal.MAX_EVENTS * 3)]
    content = fault_journal.document("gpu-a-001", BOOT, events, None, T0)
    assert len(content["events"]) == fault_journal.MAX_EVENTS
    assert content["events"][-1]["timestamp"] == events[-1].timestamp  # the newest are kept
    assert all(len(item["raw"]) == fault_journal.MAX_TEXT for item in content["events"])
    fault_journal.write(node.state_file, content)
    assert os.path.getsize(node.state_file) < 2 * fault_journal.MAX_EVENTS * (2 * fault_journal.MAX_TEXT + 200)


def test_a_storm_of_xids_keeps_the_file_bounded_and_is_written_once_per_tick(node, monkeypatch):
    node.start()
    writes = []
    real_write = fault_journal.write
    monkeypatch.setattr(fault_journal, "write", lambda path, content: (writes.append(1), real_write(path, content)))
    started = time.monotonic()
    for _storm in range(fault_journal.MAX_EVENTS + 50):
        node.now += 0.001
        node.xid(13, tick=False)
    elapsed = time.monotonic() - started
    # Not one write per XID: at most one per FAULT_JOURNAL_MIN_S of the storm ...
    assert len(writes) <= elapsed / FAULT_JOURNAL_MIN_S + 2 < fault_journal.MAX_EVENTS / 4
    node.agent._snapshot(0.0)  # ... but all of them by the next tick
    assert len(fault_journal.read(node.state_file)["events"]) == fault_journal.MAX_EVENTS


def test_kernel_log_events_and_their_position_are_written_together(node):
    node.start()
    position = {"kind": "file", "path": "/x/kmsg.log", "dev": 1, "inode": 2, "offset": 300}
    event = XidEvent(xid=79, source="kernel_log", pci_bus_id=PCI[0], raw="NVRM: Xid (PCI:0000:1b:00): 79")
    node.now += 1
    node.agent._fault_journal_written = float("-inf")  # as if the last write was long ago
    node.agent._handle(("kernel_log_read", [event], position))
    content = fault_journal.read(node.state_file)
    assert content["kernel_log"] == position and [item["xid"] for item in content["events"]] == [79]
    node.start()
    assert node.agent._kernel_log_position == position and node.verdict.state == "fatal"


def test_a_crash_mid_write_leaves_the_old_journal(node, monkeypatch):
    old = fault_journal.document("gpu-a-001", BOOT, [XidEvent(xid=48, source="nvml", gpu_index=0, timestamp=T0)],
                                 None, T0)
    fault_journal.write(node.state_file, old)
    real_write = os.write

    def half_then_crash(fd, data):
        real_write(fd, bytes(data[:len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fault_journal.os, "write", half_then_crash)
    with pytest.raises(OSError):
        fault_journal.write(node.state_file, fault_journal.document("gpu-a-001", BOOT, [], None, T0 + 1))
    monkeypatch.undo()
    assert fault_journal.read(node.state_file) == old
    assert os.listdir(os.path.dirname(node.state_file)) == [os.path.basename(node.state_file)]


def test_the_write_is_a_rename_of_a_whole_file(node, monkeypatch):
    fault_journal.write(node.state_file, fault_journal.document("gpu-a-001", BOOT, [], None, T0))
    seen = []
    real_replace = os.replace

    def look_then_replace(source, target):
        with open(source) as handle:  # the new file is complete before it takes the old one's name
            seen.append(json.load(handle)["written"])
        assert fault_journal.read(target)["written"] == T0
        real_replace(source, target)

    monkeypatch.setattr(fault_journal.os, "replace", look_then_replace)
    fault_journal.write(node.state_file, fault_journal.document("gpu-a-001", BOOT, [], None, T0 + 5))
    assert seen == [T0 + 5] and fault_journal.read(node.state_file)["written"] == T0 + 5
    assert oct(os.stat(node.state_file).st_mode & 0o777) == oct(fault_journal.MODE)


def test_another_nodes_journal_is_not_restored(node):
    content = fault_journal.document("gpu-a-002", BOOT, [XidEvent(xid=48, source="nvml", timestamp=T0)], None, T0)
    restored = fault_journal.restore(content, "gpu-a-001", BOOT, T0, 3600)
    assert restored.events == [] and restored.cleared_by == "another node"


def test_state_path_sits_beside_the_journal():
    assert fault_journal.state_path("/var/lib/gpufleet/health-events.jsonl") == \
        "/var/lib/gpufleet/health-events.state.json"
    assert fault_journal.state_path("/x/journal") == "/x/journal.state.json"


def test_boot_id_is_read_from_the_given_file(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text(BOOT + "\n")
    assert fault_journal.read_boot_id(str(path)) == BOOT
    assert fault_journal.read_boot_id(str(tmp_path / "missing")) is None


# -- the kernel-log reader resumes where the last run stopped ---------------------------------
XID_LINE = "NVRM: Xid (PCI:0000:1b:00): %d, pid=1, name=python, Ch 00000001\n"


def run_follower(path, resume=None, append=(), expect=0):
    """One run of the reader: start, append ``append`` while it runs, stop once ``expect`` XIDs are
    in (and a moment more, to see any extra); return (xids, the last position it reported)."""
    xids, positions = [], []

    def on_read(events, position):
        xids.extend(event.xid for event in events)
        positions.append(position)

    follower = FileFollower(str(path), lambda events: xids.extend(e.xid for e in events), lambda _m: None,
                            on_read=on_read, resume=resume)
    follower.start()
    try:
        time.sleep(0.3)  # opened, and at its start position
        for line in append:
            with open(path, "a") as handle:
                handle.write(line)
        deadline = time.monotonic() + 5
        while len(xids) < expect and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        follower.stop()
    return xids, (positions[-1] if positions else resume)


def test_the_kernel_log_is_resumed_without_double_counting_or_skipping(tmp_path):
    path = tmp_path / "kmsg.log"
    path.write_text(XID_LINE % 13)  # before the first run: the boot's past, not news
    xids, position = run_follower(path, append=[XID_LINE % 79], expect=1)
    assert xids == [79] and position["offset"] == os.path.getsize(path)
    # Down: a line arrives. The next run reads it once, and not the lines read before.
    with open(path, "a") as handle:
        handle.write(XID_LINE % 48)
    xids, position = run_follower(path, resume=position, expect=1)
    assert xids == [48]
    # Restarted again with nothing new: nothing is read twice; new lines still are.
    xids, position = run_follower(path, resume=position, append=[XID_LINE % 95], expect=1)
    assert xids == [95]


def test_a_kernel_log_replaced_while_down_is_read_from_its_start(tmp_path):
    path = tmp_path / "kmsg.log"
    path.write_text(XID_LINE % 13)
    status = os.stat(path)
    position = {"kind": "file", "path": str(path), "dev": status.st_dev, "inode": status.st_ino,
                "offset": status.st_size}
    os.rename(path, tmp_path / "kmsg.log.1")
    path.write_text(XID_LINE % 79)  # rotated while the agent was down
    xids = run_follower(path, resume=position)[0]
    assert xids == [79]
    # Truncated in place while down: what is there now is newer.
    status = os.stat(path)
    position = {"kind": "file", "path": str(path), "dev": status.st_dev, "inode": status.st_ino,
                "offset": status.st_size + 100}
    xids = run_follower(path, resume=position)[0]
    assert xids == [79]


def test_kmsg_sequence_numbers():
    assert kmsg_seq(b"6,1234,5678901,-;NVRM: Xid (PCI:0000:1b:00): 79, ...\n SUBSYSTEM=pci\n") == 1234
    assert kmsg_seq(b"garbage") is None
