# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Publisher and fence policy: write on change plus heartbeat, back off, newest state wins, fence once.

The API object and the Slurm client here are stand-ins for our own factories' products; the
integration tests run the same code against the lab's kube-apiserver and slurmctld.
"""
from __future__ import annotations

import threading
import time

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.fast_fence import FastFence, fence_reason
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.kube_publisher import KubePublisher
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import NodeCondition
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmNode

HEALTHY = NodeCondition("GpuHealthy", "True", "GpusHealthy", "8 GPUs healthy")
FATAL = NodeCondition("GpuHealthy", "False", "Xid79", "fatal, RESTART_BM: GPU 3 (GPU-x, 0000:3b:00.0): XID 79 ...")


class RecordingApi:
    def __init__(self):
        self.down = False
        self.patches = []
        self.events = []
        self.lock = threading.Lock()

    def patch_node_status(self, name, body, **_kwargs):
        if self.down:
            raise ConnectionRefusedError("connection refused")
        with self.lock:
            self.patches.append((name, body["status"]["conditions"][0]))

    def create_namespaced_event(self, namespace, body, **_kwargs):
        if self.down:
            raise ConnectionRefusedError("connection refused")
        with self.lock:
            self.events.append((namespace, body))


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_condition_written_on_change_and_per_heartbeat_only():
    api = RecordingApi()
    publisher = KubePublisher("gpu-a-001", lambda: api, heartbeat=0.5, backoff_max=1.0)
    publisher.start()
    try:
        for _repeat in range(50):
            publisher.offer(HEALTHY)  # the loop offers every second; unchanged offers cost nothing
        assert wait_until(lambda: len(api.patches) == 1)
        time.sleep(1.2)
        heartbeats = len(api.patches)
        assert 2 <= heartbeats <= 4  # the first write plus one per 0.5 s heartbeat
        publisher.offer(FATAL)
        assert wait_until(lambda: api.patches[-1][1]["reason"] == "Xid79")
        first, last = api.patches[0][1], api.patches[-1][1]
        assert last["status"] == "False" and last["lastTransitionTime"] >= first["lastTransitionTime"]
    finally:
        publisher.stop()


def test_api_server_down_backs_off_and_publishes_the_newest_state_when_back():
    api = RecordingApi()
    api.down = True
    errors = []
    publisher = KubePublisher("gpu-a-001", lambda: api, heartbeat=60, backoff_max=0.4, on_error=errors.append)
    publisher.start()
    try:
        publisher.offer(FATAL)
        publisher.emit("Xid79", "GPU 3 ...")
        assert wait_until(lambda: len(errors) >= 3)
        publisher.offer(HEALTHY)  # the fault cleared while the server was down
        api.down = False
        assert wait_until(lambda: api.patches and api.events)
        assert [c["reason"] for _n, c in api.patches] == ["GpusHealthy"]  # no replay of the stale state
        assert api.events[0][0] == "default" and api.events[0][1]["involvedObject"]["kind"] == "Node"
        assert api.events[0][1]["reason"] == "Xid79"
    finally:
        publisher.stop()


class PolicyApi(RecordingApi):
    """An API server whose admission policy refuses one condition type (an older policy)."""

    def patch_node_status(self, name, body, **kwargs):
        if body["status"]["conditions"][0]["type"] == "InfiniBandHealthy":
            raise PermissionError("403: a health agent may change only its node's GpuHealthy condition")
        super().patch_node_status(name, body, **kwargs)


def test_a_refused_condition_backs_off_alone_and_holds_back_neither_the_other_nor_events():
    api = PolicyApi()
    errors = []
    publisher = KubePublisher("gpu-a-001", lambda: api, heartbeat=60, backoff_max=30, on_error=errors.append)
    publisher.start()
    try:
        publisher.offer(NodeCondition("InfiniBandHealthy", "False", "IbPortDown", "fatal: mlx5_1/1 down since ..."))
        assert wait_until(lambda: errors)
        publisher.offer(HEALTHY)
        publisher.emit("Xid79", "GPU 3 ...")
        assert wait_until(lambda: api.patches and api.events, timeout=2)  # not after the refused one's backoff
        publisher.offer(FATAL)
        assert wait_until(lambda: api.patches[-1][1]["reason"] == "Xid79", timeout=2)
        assert {c["type"] for _n, c in api.patches} == {"GpuHealthy"}
        assert len(errors) <= 3  # backing off, not retried in a loop
    finally:
        publisher.stop()


class FakeSlurm:
    def __init__(self, state="IDLE", flags=(), reason=None, failures=0):
        self.node = SlurmNode(name="gpu-a-001", state=state, flags=tuple(flags), reason=reason)
        self.failures = failures
        self.updates = []

    def nodes(self, names, with_jobs=True):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("slurmctld not responding")
        return {names[0]: self.node}

    def set_node_state(self, node, state, reason=None):
        self.updates.append((node, state, reason))


def run_fence(slurm, updates):
    outcomes = []
    errors = []
    fence = FastFence("gpu-a-001", lambda: slurm, errors.append, lambda outcome, reason: outcomes.append(outcome))
    fence.start()
    try:
        for fatal, reason in updates:
            fence.update(fatal, reason)
            time.sleep(0.05)
        wait_until(lambda: outcomes, timeout=5)
        time.sleep(0.2)
    finally:
        fence.stop()
    return outcomes, errors


def test_fence_drains_once_per_fatal_episode_and_never_resumes():
    slurm = FakeSlurm()
    reason = fence_reason("Xid79", FATAL.message)
    assert reason.startswith("gpufleet: Xid79 GPU 3 (GPU-x, 0000:3b:00.0)") and "slurm-operator" not in reason
    outcomes, errors = run_fence(slurm, [(True, reason), (True, reason), (True, reason), (False, "")])
    assert outcomes == ["drained"] and errors == []
    assert slurm.updates == [("gpu-a-001", "DRAIN", reason)]


def test_the_fence_reason_is_the_peoples_line_never_the_data_line():
    condition = gpu_condition.encode(gpu_condition.NodeFault("fatal", "RESTART_BM", "GpuLost", "GPU 2: lost",
                                                             gpu_index=2, gpu_uuid="GPU-2"))
    reason = fence_reason(condition["reason"], condition["message"])
    assert reason == "gpufleet: GpuLost GPU 2: lost (agent fast fence)" and "{" not in reason


def test_fence_keeps_a_drain_someone_else_set():
    slurm = FakeSlurm(state="IDLE", flags=("DRAIN",), reason="hardware check by alice")
    outcomes, _errors = run_fence(slurm, [(True, "gpufleet: Xid79 ...")])
    assert outcomes == ["kept:drained"] and slurm.updates == []


def test_fence_retries_while_slurm_is_down():
    slurm = FakeSlurm(failures=2)
    outcomes, errors = run_fence(slurm, [(True, "gpufleet: Xid79 ...")])
    assert len(errors) == 2 and "slurmctld not responding" in errors[0]
    assert outcomes == ["drained"]
