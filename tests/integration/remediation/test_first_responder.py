"""The first responder against the lab's real parts: it watches the kube-apiserver's Nodes, drains the
node in the real slurmctld, cordons and taints it, records the phases in the remediation's state
ConfigMap, and hands the remediation to remediate-node.yml, which takes it over.

The test lab runs with self-healing off; this module starts the first responder itself, with the
lab's remediation identity and settings (the role's wiring runs in the drill's end-to-end test).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from agent_probe import AgentProbe, wait_for
from remediation_probe import NAMESPACE

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import holder

pytestmark = [pytest.mark.integration, pytest.mark.lab]

MODULE = "ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.first_responder"
TAINT = "gpufleet.io/gpu-unhealthy"


@pytest.fixture()
def responder(fleet, tmp_path):
    lab = fleet.lab
    config = tmp_path / "first-responder.json"
    config.write_text(json.dumps({"start": {
        "namespace": NAMESPACE,
        "kubeconfig": str(lab.lab_dir / "kube" / "remediation.kubeconfig"),
        "breaker": {"max_percent": 25, "max_nodes": 10, "window_s": 600, "fence_when_open": True},
        "fence": {"slurm_conf": str(lab.slurm_conf), "bin_dir": str(lab.lab_dir / "bin"), "taint_key": TAINT},
    }, "log_level": "info"}))
    log = tmp_path / "first-responder.log"
    with log.open("w") as handle:
        process = subprocess.Popen([sys.executable, "-m", MODULE, "--config", str(config)], env=dict(os.environ),
                                   stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "listed Nodes at resourceVersion" in log.read_text() or process.poll() is not None, 60,
                 what="the first responder's first list")
        assert process.poll() is None, log.read_text()[-3000:]
        yield log
    finally:
        process.terminate()  # by its own PID: this fixture started it
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def outcomes(log):
    """The first responder's outcome lines (JSON logs)."""
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("{") and '"outcome"' in line:
            found.append(json.loads(line)["outcome"])
    return found


def drains_of(fleet, node):
    text = "".join(path.read_text(errors="replace") for path in (fleet.lab.lab_dir / "log").glob("slurmctld*"))
    return re.findall(r"update_node: node %s state set to DRAIN" % re.escape(node), text)


def handed_off(progress):
    """The progress record once the first responder has handed it off, else None."""
    return progress if progress and holder.is_handoff(progress.get("holder")) else None


def test_a_fatal_node_is_fenced_before_any_playbook_and_the_playbook_takes_it_over(fleet, responder):
    node = fleet.active_nodes()[3]
    api = fleet.lab.kube()
    # Opted out: the playbook that takes over stops after the fence, as it would for any node.
    api.patch_node(node, {"metadata": {"labels": {"gpufleet.io/remediation": "disabled"}}})
    drains_before = len(drains_of(fleet, node))
    try:
        AgentProbe(fleet.lab, node).fakegpu("xid", "--gpu", "2", "--xid", "79")
        progress = wait_for(lambda: handed_off(fleet.progress(node)), 60, 0.1,
                            what="the first responder's handoff of %s" % node)
        remediation_id = progress["id"]
        assert {"fence", "quarantine"} <= set(progress["phases"]), progress
        assert progress["phases"]["quarantine"]["outcome"]["changed"], progress
        assert progress["trigger"]["source"] == "first_responder"
        # Slurm: drained with the remediation's reason, naming it; no job lands there now.
        slurm = fleet.slurm_node(node)
        assert "DRAIN" in slurm["State"] and remediation_id in slurm["Reason"], slurm
        assert slurm["Reason"].startswith("gpufleet: Xid79")
        # Kubernetes: cordoned and tainted, the quarantine annotation naming the remediation.
        kube = fleet.kube_node(node)
        assert kube["spec"].get("unschedulable")
        assert [t for t in kube["spec"].get("taints") or [] if t["key"] == TAINT]
        record = json.loads(kube["metadata"]["annotations"]["gpufleet.io/quarantine"])
        assert record["remediation_id"] == remediation_id and record["cordoned_by"] == "gpufleet"
        seen = outcomes(responder)
        assert seen and seen[-1]["node"] == node and seen[-1]["handed_off"] and "error" not in seen[-1], seen

        run = fleet.remediate(node)
        assert run.rc == 0, run.output[-3000:]
        assert "taking over %s" % remediation_id in run.output
        audit = fleet.audit(node)[-1]
        # The playbook went on with the responder's remediation: the same id, the fence not done
        # again, no resume counted, stopped by the opt-out after notify.
        assert audit["id"] == remediation_id and audit["resumed_at"] == [], audit
        assert audit["result"] == "stopped" and audit["stopped"]["at_phase"] == "opt_out", audit
        phases = [step["phase"] for step in audit["timeline"]]
        assert phases[:3] == ["fence", "quarantine", "notify"] and phases.count("fence") == 1, phases
        assert len(drains_of(fleet, node)) - drains_before == 1  # drained once, by the first responder
        # A heartbeat of the same condition is no new episode: nothing more was started.
        time.sleep(2)
        assert len([o for o in outcomes(responder) if o["node"] == node]) == 1
    finally:
        fleet.heal(node)


def test_a_degraded_node_is_left_to_the_playbook(fleet, responder):
    node = fleet.active_nodes()[1]
    try:
        probe = AgentProbe(fleet.lab, node)
        probe.fakegpu("xid", "--gpu", "1", "--xid", "13")  # degraded: notify only
        probe.wait_condition(lambda c: c["status"] == "False", 30, what="GpuHealthy False on %s" % node)
        time.sleep(2)
        assert fleet.progress(node) is None
        assert not fleet.kube_node(node)["spec"].get("unschedulable")
        assert "DRAIN" not in fleet.slurm_node(node)["State"]
        assert not [o for o in outcomes(responder) if o["node"] == node]
    finally:
        fleet.heal(node)


def test_a_run_that_finds_the_first_responder_holding_the_node_waits_for_its_handoff(fleet, monkeypatch):
    """The race the handoff closes, through the real API server: the trigger's playbook starts while
    the first responder still holds the node. It waits for the handoff and takes the remediation
    over (no resume counted), instead of ending as a duplicate that nobody continues; if the
    responder never lets go, it ends as a duplicate after store.HANDOFF_WAIT_S."""
    from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import core_v1
    from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import store as store_module

    def store():
        return store_module.RemediationStore(core_v1(str(fleet.lab.kubeconfig)), store_module.Policy())

    # A live process stands for the first responder: a holder is alive while its PID runs.
    sleeper = subprocess.Popen(["sleep", "300"])
    first, second = fleet.active_nodes()[0], fleet.active_nodes()[2]
    fault = {"action": "RESTART_BM", "xid": 79}
    try:
        def claim_as_responder(node):
            now = time.time()
            me = dict(holder.current(now, pid=sleeper.pid), role=holder.FIRST_RESPONDER)
            claimed = store().start(node, {"source": "first_responder"}, now, fault, me)
            assert claimed["skip"] is None, claimed
            assert holder.is_first_responder(fleet.progress(node)["holder"])
            return claimed["id"]

        remediation_id = claim_as_responder(first)
        handoff = threading.Timer(1.5, lambda: store().hand_off(first, remediation_id, time.time()))
        handoff.start()
        began = time.monotonic()
        taken = store().start(first, {"source": "alertmanager"}, time.time(), fault)
        waited = time.monotonic() - began
        handoff.join()
        assert taken["skip"] is None and taken["id"] == remediation_id, taken
        assert 1.0 <= waited < store_module.HANDOFF_WAIT_S, waited
        progress = fleet.progress(first)
        assert not holder.is_handoff(progress["holder"]) and not holder.is_first_responder(progress["holder"])
        assert progress["holder"]["pid"] != sleeper.pid and not progress.get("resumed"), progress

        monkeypatch.setattr(store_module, "HANDOFF_WAIT_S", 1.0)
        claim_as_responder(second)
        began = time.monotonic()
        duplicate = store().start(second, {"source": "alertmanager"}, time.time(), fault)
        assert duplicate["skip"] == "duplicate" and time.monotonic() - began >= 1.0, duplicate
        assert holder.is_first_responder(fleet.progress(second)["holder"])
    finally:
        sleeper.kill()
        sleeper.wait(5)
        fleet.heal(first)
        fleet.heal(second)
