"""The first responder's own policy: its settings, which events it acts on, one start per node at a
time, and the handoff. The remediation's calls (start, hand-off) are faked here, as our own
interfaces; the lab test (tests/integration/remediation/test_first_responder.py) runs them for real."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import holder
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.first_responder import (
    Responder,
    Settings,
    trigger_of,
)

START = {"namespace": "gpufleet-system", "kubeconfig": "/lab/kube/remediation.kubeconfig", "context": "",
         "breaker": {"max_percent": 25}, "fence": {"slurm_conf": "/lab/slurm/slurm.conf", "bin_dir": "",
                                                   "taint_key": "gpufleet.io/gpu-unhealthy"}}

REST_FENCE = {"slurm_api": "rest", "rest_url": "http://127.0.0.1:6820", "rest_jwt_key_file": "/k",
              "taint_key": "gpufleet.io/gpu-unhealthy"}


def event(node="gpu-a-001", verdict="fatal"):
    return {"gpufleet_condition": {"node": node, "type": "GpuHealthy", "status": "False", "reason": "Xid79",
                                   "message": "fatal, RESTART_BM: GPU 2: XID 79", "verdict": verdict,
                                   "action": "RESTART_BM", "last_transition_time": "2026-12-03T10:00:00Z",
                                   "fingerprint": "%s/False/Xid79/2026-12-03T10:00:00Z" % node}}


def settle(responder, count, timeout=5.0):
    deadline = time.monotonic() + timeout
    while len(responder.outcomes) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(responder.outcomes)


@pytest.mark.parametrize("raw, field", [
    ({}, "start.fence"),
    ({"start": dict(START, notify={})}, "start.notify"),
    ({"start": dict(START, fence=dict(START["fence"], command="rm -rf /"))}, "start.fence.command"),
    ({"start": START, "verdicts": ["healthy"]}, "verdicts"),
    ({"start": START, "workers": 0}, "workers"),
    ({"start": START, "workers": True}, "workers"),
    ({"start": START, "extra": 1}, "extra"),
    ({"start": dict(START, breaker={"max_percent": "x"})}, "remediation_breaker.max_percent"),
    ({"start": dict(START, lease=-1)}, "lease"),
    ({"start": dict(START, fence=dict(START["fence"], slurm_api="rest"))}, "start.fence.slurm_conf"),
    ({"start": dict(START, fence=dict(REST_FENCE, rest_url=None))}, "start.fence.rest_url"),
    ({"start": dict(START, fence=dict(REST_FENCE, rest_url="http://10.0.0.1:6820"))}, "start.fence.rest_url"),
    ({"start": dict(START, fence=dict(REST_FENCE, rest_jwt_key_file="/nonexistent/key"))},
     "start.fence.rest_jwt_key_file"),
])
def test_bad_settings_name_the_field(raw, field):
    with pytest.raises(FieldError) as caught:
        Settings(raw)
    assert caught.value.field == field


def test_check_config_exits_2_naming_the_field_and_0_when_good(tmp_path, child_env):
    module = "ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.first_responder"
    path = tmp_path / "first-responder.json"
    path.write_text(json.dumps({"start": dict(START, lease="soon")}))
    bad = subprocess.run([sys.executable, "-m", module, "--check-config", "--config", str(path)],
                         capture_output=True, text=True, check=False, env=child_env)
    assert bad.returncode == 2 and "lease" in bad.stderr
    path.write_text(json.dumps({"start": dict(START, alertmanager_url="http://user:secret@127.0.0.1:9093")}))
    good = subprocess.run([sys.executable, "-m", module, "--check-config", "--config", str(path)],
                          capture_output=True, text=True, check=False, env=child_env)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["verdicts"] == ["fatal"]
    assert "secret" not in good.stdout


def test_require_kubeconfig_refuses_a_missing_file_naming_it(tmp_path, child_env):
    """The lab's check: a first responder without its kubeconfig could only retry its watch forever."""
    module = "ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.first_responder"
    path = tmp_path / "first-responder.json"
    missing = tmp_path / "kube" / "remediation.kubeconfig"
    path.write_text(json.dumps({"start": dict(START, kubeconfig=str(missing))}))
    command = [sys.executable, "-m", module, "--check-config", "--require-kubeconfig", "--config", str(path)]
    refused = subprocess.run(command, capture_output=True, text=True, check=False, env=child_env)
    assert refused.returncode == 2 and "start.kubeconfig" in refused.stderr and str(missing) in refused.stderr
    missing.parent.mkdir()
    missing.write_text("apiVersion: v1\nkind: Config\n")
    accepted = subprocess.run(command, capture_output=True, text=True, check=False, env=child_env)
    assert accepted.returncode == 0, accepted.stderr


def test_only_the_verdicts_asked_for_start_a_run_with_the_settings_and_the_episode():
    calls, handed = [], []
    responder = Responder(Settings({"start": START}), lambda params: calls.append(params) or {
        "id": "r-1", "skip": None, "first": {"fence": {}, "quarantine": {}}, "plan": {"name": "RESTART_BM"}},
        lambda params, remediation_id: handed.append((params["node"], remediation_id)) or True)
    assert not responder.offer(event(verdict="degraded"))
    assert not responder.offer({"gpufleet_condition": {"verdict": "fatal"}})  # no node
    assert responder.offer(event())
    outcome = settle(responder, 1)[0]
    responder.stop()
    assert outcome["handed_off"] and outcome["plan"] == "RESTART_BM" and "error" not in outcome
    assert handed == [("gpu-a-001", "r-1")]
    params = calls[0]
    assert params["node"] == "gpu-a-001"
    # An empty setting is left out: remediation_start's default applies.
    assert params["fence"] == {"slurm_conf": "/lab/slurm/slurm.conf", "taint_key": "gpufleet.io/gpu-unhealthy"}
    assert params["trigger"]["source"] == "first_responder"
    assert params["trigger"]["starts_at"] == "2026-12-03T10:00:00Z"
    assert "notify" not in params


def test_a_node_in_hand_is_not_started_twice_and_other_nodes_go_in_parallel():
    release = threading.Event()
    started = []

    def start(params):
        started.append(params["node"])
        release.wait(5)
        return {"id": "r-" + params["node"], "skip": None, "first": {}}

    responder = Responder(Settings({"start": START}), start, lambda params, remediation_id: True)
    assert responder.offer(event("gpu-a-001"))
    assert not responder.offer(event("gpu-a-001"))  # its start is still running
    assert responder.offer(event("gpu-a-002"))
    deadline = time.monotonic() + 5
    while len(started) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(started) == ["gpu-a-001", "gpu-a-002"]
    release.set()
    settle(responder, 2)
    assert responder.offer(event("gpu-a-001"))  # done: a new episode is taken up again
    settle(responder, 3)
    responder.stop()


def test_a_skip_is_not_handed_off_and_a_failed_claim_is():
    handed = []

    def start(params):
        if params["node"] == "gpu-a-001":
            return {"id": "r-1", "skip": "duplicate", "message": "already in remediation r-1"}
        error = GpufleetError("slurmctld did not answer")
        error.remediation_id = "r-2"
        raise error

    responder = Responder(Settings({"start": START}), start,
                          lambda params, remediation_id: handed.append(remediation_id) or True)
    responder.offer(event("gpu-a-001"))
    responder.offer(event("gpu-a-002"))
    outcomes = {outcome["node"]: outcome for outcome in settle(responder, 2)}
    responder.stop()
    assert handed == ["r-2"]
    assert outcomes["gpu-a-001"]["skip"] == "duplicate"
    assert "slurmctld" in outcomes["gpu-a-002"]["error"] and outcomes["gpu-a-002"]["handed_off"]


def test_an_unexpected_error_is_reported_and_does_not_stop_the_responder():
    def start(params):
        raise RuntimeError("boom")

    responder = Responder(Settings({"start": START}), start, lambda params, remediation_id: True)
    responder.offer(event())
    assert "boom" in settle(responder, 1)[0]["error"]
    responder.offer(event("gpu-a-002"))
    assert len(settle(responder, 2)) == 2
    responder.stop()


def test_a_handed_off_holder_is_nobody_alive_and_a_responder_holds_as_itself():
    now = time.time()
    assert not holder.alive(holder.handed_off(holder.FIRST_RESPONDER, now), now, 1800.0)
    assert holder.is_handoff(holder.handed_off(holder.FIRST_RESPONDER, now))
    try:
        holder.hold_as(holder.FIRST_RESPONDER)
        me = holder.current(now)
        assert holder.is_first_responder(me)
        assert holder.alive(me, now, 1800.0)  # this live process, seen by another run
    finally:
        holder._PROCESS_ROLE.clear()
    assert not holder.is_first_responder(holder.current(now))


def test_the_trigger_keeps_the_episode_as_data():
    trigger = trigger_of(event(), 1000.0)
    assert trigger["fingerprint"].startswith("gpu-a-001/False/Xid79/")
    assert trigger["condition"]["verdict"] == "fatal" and trigger["received_at"] == 1000.0
