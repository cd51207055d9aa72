"""A restarted lab agent does not forget an unresolved fault.

XID 48 (double-bit ECC: nothing stays in NVML's counters for it) on one GPU of a lab node; the
node's agent is killed (SIGKILL, by its recorded PID: a crash, an OOM kill) and started again the
way the lab starts it (its recipe, through lab_process). The new process publishes the node fatal
again from its fault journal, without counting or journaling the XID a second time. SIGUSR1 (what
the remediation sends after a GPU reset) then makes the node healthy, and the fault journal empty.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from agent_probe import AgentProbe, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent import fault_journal
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import process
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.spares import load_recipes

pytestmark = [pytest.mark.integration, pytest.mark.lab]

NODE = "gpu-a-002"


def journal_xids(path):
    try:
        content = fault_journal.read(str(path))
    except fault_journal.FaultJournalError:
        return None
    return [(event["xid"], event.get("gpu_index")) for event in (content or {}).get("events", [])]


def crash_and_restart(lab, node):
    """SIGKILL the node's agent by its recorded PID, then start it as the lab does; the new PID."""
    entry = load_recipes(str(lab.lab_dir))[node].parts["agent"]
    recipe = entry["process"]
    spec = process.ProcessSpec(name=recipe["name"], argv=[str(word) for word in recipe["argv"]],
                               run_dir=recipe["run_dir"], log_dir=recipe["log_dir"],
                               env={str(k): str(v) for k, v in recipe["env"].items()})
    record = process.read_record(spec.run_dir, spec.name)
    assert record is not None and process.is_alive(record)
    os.kill(record.pid, signal.SIGKILL)
    wait_for(lambda: not process.is_alive(record), 10, what="the agent of %s gone" % node)
    outcome = process.ensure_started(spec, process.ReadinessCheck(http=entry["wait_for"]["http"], timeout=60),
                                     check_mode=False)
    assert outcome.action == "start" and outcome.pid != record.pid
    return outcome.pid


def test_a_restarted_agent_keeps_an_unresolved_xid_until_sigusr1(lab):
    probe = AgentProbe(lab, NODE)
    probe.reset()
    state_file = fault_journal.state_path(str(probe.journal))
    wait_for(lambda: journal_xids(state_file) == [], 5, what="an empty fault journal after the reset")
    faults_before = probe.count_journal("fault")

    probe.fakegpu("xid", "--gpu", "2", "--xid", "48")
    probe.wait_condition(lambda c: c["reason"] == "Xid48" and c["message"].startswith("fatal, "))
    wait_for(lambda: journal_xids(state_file) == [(48, 2)], 5, what="XID 48 in the fault journal")
    assert probe.count_journal("fault") == faults_before + 1

    restarted = time.time()
    pid = crash_and_restart(lab, NODE)
    assert probe.pid == pid
    # The new process judges the node fatal from the start, and writes that to the API server
    # (a condition it wrote itself: heartbeat after the restart).
    assert probe.sample("gpufleet_node_health_verdict", state="fatal") == 1.0
    assert probe.sample("gpufleet_gpu_health", gpu="2", state="fatal") == 1.0
    condition = probe.wait_condition(
        lambda c: c["heartbeat"] is not None and c["heartbeat"].timestamp() >= int(restarted),
        what="the restarted agent's condition")
    assert condition["status"] == "False" and condition["reason"] == "Xid48", condition
    assert condition["message"].startswith("fatal, RESET_GPU: GPU 2 ("), condition
    # Restored, not news: not journaled, counted or reported again.
    restored = [r for r in probe.journal_records() if r.get("event") == "restored"]
    assert restored and restored[-1]["restored"] == 1, restored
    assert probe.count_journal("fault") == faults_before + 1
    assert probe.sample("gpufleet_gpu_xid_errors_total", gpu="2", xid="48") is None
    assert journal_xids(state_file) == [(48, 2)]

    # A GPU reset: SIGUSR1 (probe.reset clears the fake GPUs and sends it) -> healthy, journal empty.
    probe.reset()
    assert probe.sample("gpufleet_node_health_verdict", state="healthy") == 1.0
    wait_for(lambda: journal_xids(state_file) == [], 5, what="the fault journal emptied by SIGUSR1")
    assert fault_journal.read(state_file)["boot_id"] == fault_journal.read_boot_id()
