# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""job_hang: SIGSTOP to the protected job's batch step on the target, SIGCONT at rollback; the
commands are built by our real Slurm client and runner, and recorded instead of run."""

from __future__ import annotations

from typing import List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments, job_hang
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner


class FakeClient(SlurmClient):
    def __init__(self, state="RUNNING", host="gpu-a-001", gone_on_signal=False) -> None:
        self.calls: List[List[str]] = []
        self.state, self.host, self.gone_on_signal = state, host, gone_on_signal
        super().__init__(SlurmRunner(run=self._run, slurm_conf="/lab/slurm.conf"))

    def _run(self, argv, env, timeout):
        self.calls.append(list(argv))
        if self.gone_on_signal:
            return 1, "", "scancel: error: Kill job error on job id 42: Job/step already completing or completed\n"
        return 0, "", ""

    def jobs(self, nodes=None, states=None) -> List[SlurmJob]:
        return [SlurmJob(job_id="42", state=self.state, batch_host=self.host, nodes=(self.host,))]


def spec(**params):
    return {"experiment": "job_hang", "node": "gpu-a-001", "params": dict({"job_id": 42}, **params)}


@pytest.fixture
def client(monkeypatch):
    fake = FakeClient()
    monkeypatch.setattr(job_hang, "context_slurm", lambda ctx: fake)
    return fake


def test_inject_stops_the_batch_step_and_revert_resumes_it(client):
    undo = job_hang.inject(spec(), FaultContext())
    assert client.calls == [["scancel", "--signal=STOP", "--batch", "--full", "42"]]
    assert undo["job_id"] == "42" and undo["batch_host"] == "gpu-a-001"
    result = job_hang.revert(dict(spec(), **undo), FaultContext())
    assert client.calls[-1] == ["scancel", "--signal=CONT", "--batch", "--full", "42"]
    assert result["reverted"] == ["job 42: SIGCONT to its batch step"] and result["already"] is False


def test_a_job_on_another_node_is_refused_and_nothing_is_signalled(client):
    client.host = "gpu-a-003"
    with pytest.raises(FieldError, match="runs its batch step on gpu-a-003, not on the target gpu-a-001") as err:
        job_hang.inject(spec(), FaultContext())
    assert err.value.field == "params.job_id" and client.calls == []


@pytest.mark.parametrize("state", ["PENDING", "COMPLETED"])
def test_a_job_that_is_not_running_is_refused(client, state):
    client.state = state
    with pytest.raises(FieldError, match="job 42 is %s, not RUNNING" % state):
        job_hang.inject(spec(), FaultContext())
    assert client.calls == []


def test_check_mode_signals_nothing(client):
    undo = job_hang.inject(spec(), FaultContext(check_mode=True))
    assert undo["check_mode"] is True and client.calls == []


def test_the_job_is_required_and_checked():
    with pytest.raises(FieldError, match="is required") as err:
        job_hang.plan({"experiment": "job_hang", "node": "gpu-a-001", "params": {}})
    assert err.value.field == "params.job_id"
    with pytest.raises(FieldError) as err:
        job_hang.plan(spec(job_id="42; rm -rf /"))
    assert err.value.field == "params.job_id"


def test_a_revert_after_a_crash_mid_inject_sends_sigcont_and_a_gone_job_needs_nothing(monkeypatch):
    gone = FakeClient(gone_on_signal=True)
    monkeypatch.setattr(job_hang, "context_slurm", lambda ctx: gone)
    result = job_hang.revert(spec(), FaultContext())  # only the spec: the params name the job
    assert gone.calls == [["scancel", "--signal=CONT", "--batch", "--full", "42"]]
    assert result["already"] is True and "has ended" in result["note"]


def test_plan_names_both_commands():
    planned = job_hang.plan(spec())
    assert planned["backends"] == ["slurm"]
    assert any("--signal=STOP --batch --full 42" in action for action in planned["actions"])
    assert any("--signal=CONT --batch --full 42" in action for action in planned["actions"])


def test_the_loop_expects_detection_the_alert_and_the_job_requeued_and_resumed_without_a_fence():
    expect = experiments.loop_expectations(experiments.get("job_hang"), {"job_id": "42"})
    assert expect["alerts"] == ["GpuJobStalled"] and expect["fences"] is False and expect["requeues"] is True
    assert expect["no_recovery"] == ""
    assert expect["detection"]["query"].format(node="gpu-a-001", job_id="42") == \
        'max(gpufleet_job_stalled{node="gpu-a-001",job_id="42"})'


def test_the_gate_hands_the_protected_job_to_job_hang_and_checkpoint_kill_only(bare_metal):
    from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api

    gated = api.drill_gate(dict(bare_metal, experiment="job_hang", protected_job="42"), check_mode=True)
    assert gated["drill"]["params"]["job_id"] == "42" and gated["drill"]["on_host"] is False
    killed = api.drill_gate(dict(bare_metal, experiment="checkpoint_kill", protected_job="42",
                                 protected_output="/tmp/out"), check_mode=True)
    assert killed["drill"]["params"]["job_id"] == "42"
    # checkpoint_storage takes a job only for mode slow: the protected job is not forced on a cut
    # (this machine's /tmp may not be a volume of its own; that refusal is about the path, not the job).
    try:
        cut = api.drill_gate(dict(bare_metal, experiment="checkpoint_storage", protected_job="42",
                                  params={"path": "/tmp", "mode": "cut"}, allowed_dirs=["/tmp"]), check_mode=True)
    except FieldError as exc:
        assert exc.field == "params.path", exc
    else:
        assert "job_id" not in cut["drill"]["params"]
