"""slurm.evacuate: signal, wait the grace, requeue or cancel, report fates; over a fake of our client and a fake clock.

The fake keeps jobs in memory and moves them the way slurmctld does (a job that exits 75 after its
SIGTERM goes PENDING by RequeueExit; a requeue makes it PENDING; a cancel CANCELLED). The argv
comes from the real runner, so the commands asserted are the ones Slurm would get.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmTimeoutError,
    SlurmUnknownNodeError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.evacuate import (
    CANCELLED,
    KEPT,
    LEFT,
    REQUEUED,
    EvacuationError,
    evacuate,
    list_jobs,
    slurm_jobs,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_squeue import filter_jobs, job_from_json
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import CommandResult, SlurmRunner

NODE = "gpu-a-001"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(round(seconds, 3))
        self.now += seconds


@dataclass
class Job:
    job_id: str
    name: str = "train"
    node: str = NODE
    state: str = "RUNNING"
    requeue: Optional[bool] = True
    # After the signal: (seconds, state it ends in). None: it ignores the signal.
    on_signal: Optional[Tuple[float, str]] = None
    # It ends by itself between the listing and its signal.
    ends_before_signal: bool = False
    refuse_requeue: bool = False
    signalled_at: Optional[float] = None
    flags: Tuple[str, ...] = ()
    exit_code: Optional[int] = None


@dataclass
class FakeSlurm:
    """Our SlurmClient's job calls over in-memory jobs."""

    jobs_: List[Job]
    clock: Clock
    check_mode: bool = False
    known: Tuple[str, ...] = (NODE, "gpu-a-002")
    fail_signal: Dict[str, Exception] = field(default_factory=dict)
    calls: List[tuple] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.runner = SlurmRunner(check_mode=self.check_mode)

    def _settle(self) -> None:
        for job in self.jobs_:
            if job.signalled_at is not None and job.on_signal and job.state == "RUNNING":
                delay, final = job.on_signal
                if self.clock.now >= job.signalled_at + delay:
                    job.state = final
                    if final == "PENDING":
                        job.node = ""

    def _job(self, job_id: str) -> Job:
        return next(job for job in self.jobs_ if job.job_id == job_id)

    def nodes(self, names, future=False, with_jobs=True):
        self.calls.append(("nodes", tuple(names)))
        missing = [name for name in names if name not in self.known]
        if missing:
            raise SlurmUnknownNodeError(["scontrol", "--future", "--oneliner", "show", "node"], missing)
        return {name: None for name in names}

    def jobs(self, nodes=None, states=None):
        self.calls.append(("jobs", tuple(nodes or ()), bool(states)))
        self._settle()
        listed = [SlurmJob(job_id=job.job_id, state=job.state, name=job.name, nodelist=job.node,
                           nodes=(job.node,) if job.node else (), requeue=job.requeue, flags=job.flags,
                           exit_code=job.exit_code)
                  for job in self.jobs_]
        return filter_jobs(listed, nodes=nodes, states=states)

    def _mutate(self, what, options, **values) -> CommandResult:
        argv = self.runner.argv(*options, **values)
        self.calls.append((what, tuple(argv)))
        if self.check_mode:
            return CommandResult(argv=argv, ran=False)
        return CommandResult(argv=argv, rc=0)

    def _gone(self, job: Job, argv) -> None:
        self._settle()
        if job.state not in ("RUNNING", "SUSPENDED", "COMPLETING") or job.node != NODE:
            raise SlurmCommandError(argv, 1, stderr="scancel: error: Kill job error on job id %s: "
                                                    "Job/step already completing or completed" % job.job_id)

    def signal_jobs(self, job_ids, signal="TERM", full=True):
        (job_id,) = job_ids
        job = self._job(job_id)
        if job_id in self.fail_signal:
            raise self.fail_signal[job_id]
        if job.ends_before_signal:
            job.state, job.node = "COMPLETED", ""
        if not self.check_mode:
            self._gone(job, ["scancel", job_id])
        result = self._mutate("signal", ("scancel", "signal full job_ids"), signal=signal, full=full, job_ids=job_ids)
        if not self.check_mode:
            job.signalled_at = self.clock.now
        return result

    def requeue_exit_codes(self):
        self.calls.append(("requeue_exit_codes",))
        return [75]

    def requeue(self, job_ids):
        (job_id,) = job_ids
        job = self._job(job_id)
        # slurmctld requeues a finished batch job too, while it still lists it (MinJobAge).
        if not self.check_mode:
            if job.state not in ("FAILED", "COMPLETED", "CANCELLED"):
                self._gone(job, ["scontrol", "requeue", job_id])
            if job.refuse_requeue:
                raise SlurmCommandError(["scontrol", "requeue", job_id], 1,
                                        stderr="Requeue of JobId=%s returned an error: Only batch jobs are accepted "
                                               "or processed" % job_id)
        result = self._mutate("requeue", ("scontrol", "action job_list"), action=["requeue"], job_list=job_ids)
        if not self.check_mode:
            job.state, job.node = "PENDING", ""
        return result

    def cancel(self, job_ids):
        (job_id,) = job_ids
        job = self._job(job_id)
        if not self.check_mode:
            self._gone(job, ["scancel", job_id])
        result = self._mutate("cancel", ("scancel", "job_ids"), job_ids=job_ids)
        if not self.check_mode:
            job.state, job.node = "CANCELLED", ""
        return result

    def mutations(self) -> List[tuple]:
        return [call for call in self.calls if call[0] in ("signal", "requeue", "cancel")]


def run(slurm: FakeSlurm, **options):
    # One fake clock is both the monotonic and the wall clock.
    return evacuate(slurm, NODE, clock=slurm.clock, sleep=slurm.clock.sleep, wall=slurm.clock, **options)


def fates(result) -> Dict[str, Tuple[bool, str, Optional[str]]]:
    return {job["job_id"]: (job["signalled"], job["fate"], job["state"]) for job in result["jobs"]}


def test_no_jobs_changes_nothing_and_runs_nothing():
    clock = Clock()
    slurm = FakeSlurm([Job("7", node="gpu-a-002")], clock)
    result = run(slurm)
    assert result == {"changed": False, "done": True, "jobs": [], "signalled": [], "waited": 0.0, "command": [],
                      "grace_started": 100.0, "grace_left": 0.0}
    assert slurm.mutations() == [] and clock.sleeps == []


def test_a_job_that_checkpoints_and_exits_75_left_and_is_pending():
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.4, "PENDING")), Job("8", node="gpu-a-002")], clock)
    result = run(slurm, grace=30, poll=1)
    assert result["changed"] and result["signalled"] == ["7"]
    assert result["command"] == [["scancel", "--signal=TERM", "--full", "7"]]
    assert fates(result) == {"7": (True, LEFT, "PENDING")}
    assert clock.sleeps == [1] and result["waited"] == 1.0  # one poll, not the whole grace
    assert result["jobs"][0]["requeue"] is True and result["jobs"][0]["name"] == "train"


def test_after_the_grace_requeueable_jobs_are_requeued_and_the_rest_cancelled():
    clock = Clock()
    slurm = FakeSlurm([Job("7"), Job("8", requeue=False), Job("9", on_signal=(2.5, "COMPLETED"))], clock)
    result = run(slurm, grace=10, poll=3, signal="usr1")
    assert fates(result) == {"7": (True, REQUEUED, "PENDING"), "8": (True, CANCELLED, "CANCELLED"),
                             "9": (True, LEFT, "COMPLETED")}
    assert sum(clock.sleeps) == pytest.approx(10) and clock.sleeps == [3, 3, 3, 1]  # the last sleep ends at the grace
    assert result["waited"] == 10.0
    assert result["command"] == [
        ["scancel", "--signal=USR1", "--full", "7"], ["scancel", "--signal=USR1", "--full", "8"],
        ["scancel", "--signal=USR1", "--full", "9"], ["scontrol", "requeue", "7"], ["scancel", "8"]]


def test_then_cancel_cancels_requeueable_jobs_too():
    clock = Clock()
    slurm = FakeSlurm([Job("7")], clock)
    result = run(slurm, grace=0, then="cancel")
    assert fates(result) == {"7": (True, CANCELLED, "CANCELLED")}
    assert clock.sleeps == [] and result["command"][-1] == ["scancel", "7"]


def test_an_unknown_requeue_flag_counts_as_requeueable_and_a_refusal_cancels():
    clock = Clock()
    slurm = FakeSlurm([Job("7", requeue=None), Job("8", requeue=None, refuse_requeue=True)], clock)
    result = run(slurm, grace=0)
    jobs = {job["job_id"]: job for job in result["jobs"]}
    assert (jobs["7"]["fate"], jobs["7"]["requeue"]) == (REQUEUED, None) and "JobRequeue=1" in jobs["7"]["note"]
    assert jobs["8"]["fate"] == CANCELLED and "Only batch jobs" in jobs["8"]["note"]
    assert ["scancel", "8"] in result["command"] and ["scontrol", "requeue", "8"] not in result["command"]


def test_skip_signal_signals_at_most_once_but_still_waits_and_requeues():
    clock = Clock()
    slurm = FakeSlurm([Job("12_3"), Job("13", on_signal=(0.1, "PENDING"))], clock)
    result = run(slurm, grace=2, poll=1, skip_signal=["12_3"])
    assert result["signalled"] == ["13"]
    assert fates(result) == {"12_3": (True, REQUEUED, "PENDING"), "13": (True, LEFT, "PENDING")}
    assert result["command"] == [["scancel", "--signal=TERM", "--full", "13"], ["scontrol", "requeue", "12_3"]]
    # A rerun once everything left: nothing on the node, nothing done.
    assert run(slurm, skip_signal=["12_3", "13"])["changed"] is False


def test_a_rerun_whose_jobs_all_left_by_themselves_reports_no_change():
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(5, "PENDING"))], clock)
    slurm.jobs_[0].signalled_at = clock.now  # signalled by the crashed run
    result = run(slurm, grace=30, skip_signal=["7"])
    assert result["changed"] is False and fates(result) == {"7": (True, LEFT, "PENDING")}
    assert slurm.mutations() == []


def test_check_mode_runs_nothing_waits_for_nothing_and_says_what_it_would_do():
    clock = Clock()
    jobs = [Job("7"), Job("8", requeue=False), Job("9", on_signal=(0.1, "PENDING"))]
    slurm = FakeSlurm(jobs, clock, check_mode=True)
    result = run(slurm, grace=120, skip_signal=["9"])
    assert result["changed"] and clock.sleeps == [] and result["waited"] == 0.0
    assert fates(result) == {"7": (True, REQUEUED, "RUNNING"), "8": (True, CANCELLED, "RUNNING"),
                             "9": (True, REQUEUED, "RUNNING")}
    assert result["command"] == [
        ["scancel", "--signal=TERM", "--full", "7"], ["scancel", "--signal=TERM", "--full", "8"],
        ["scontrol", "requeue", "7"], ["scancel", "8"], ["scontrol", "requeue", "9"]]
    assert [job.state for job in jobs] == ["RUNNING"] * 3 and all(job.signalled_at is None for job in jobs)


def test_a_job_that_ends_before_its_signal_left_and_is_not_an_error():
    clock = Clock()
    slurm = FakeSlurm([Job("7", ends_before_signal=True), Job("8", on_signal=(0, "PENDING"))], clock)
    result = run(slurm, grace=5)
    assert fates(result) == {"7": (False, LEFT, "COMPLETED"), "8": (True, LEFT, "PENDING")}
    assert result["signalled"] == ["8"]


def test_a_job_completing_after_the_grace_is_left_to_end():
    clock = Clock()
    slurm = FakeSlurm([Job("7", flags=("COMPLETING",))], clock)
    result = run(slurm, grace=0)
    assert fates(result)["7"] == (False, LEFT, "RUNNING") and "completing" in result["jobs"][0]["note"]
    assert slurm.mutations() == [] and result["changed"] is False  # an ended job is not signalled either


def test_a_failure_halfway_says_what_was_signalled():
    clock = Clock()
    down = SlurmCommandError(["scancel", "--signal=TERM", "--full", "8"], 1,
                             stderr="scancel: error: Kill job error on job id 8: Unable to contact slurm controller")
    slurm = FakeSlurm([Job("7"), Job("8")], clock, fail_signal={"8": down})
    with pytest.raises(EvacuationError, match=r"Unable to contact.*signalled by this run: 7") as failed:
        run(slurm)
    details = failed.value.details()
    assert details["signalled"] == ["7"] and details["command"] == [["scancel", "--signal=TERM", "--full", "7"]]
    assert details["rc"] == 1 and details["cmd"][0] == "scancel"


def test_a_timeout_is_never_taken_for_a_job_that_left():
    clock = Clock()
    slurm = FakeSlurm([Job("7")], clock, fail_signal={"7": SlurmTimeoutError(["scancel", "7"], 30)})
    with pytest.raises(EvacuationError, match="timed out after 30s"):
        run(slurm)


def test_an_unknown_node_is_a_typed_error_and_nothing_runs():
    clock = Clock()
    slurm = FakeSlurm([Job("7")], clock)
    with pytest.raises(SlurmUnknownNodeError) as unknown:
        evacuate(slurm, "gpu-z-999", clock=clock, sleep=clock.sleep)
    assert unknown.value.nodes == ["gpu-z-999"]
    assert slurm.mutations() == []
    with pytest.raises(SlurmUnknownNodeError):
        slurm_jobs(slurm, "gpu-z-999", "listed")


@pytest.mark.parametrize("options, field", [
    (dict(node="gpu-a-[001-002]"), "node"),
    (dict(node="--all"), "node"),
    (dict(signal="TERM; rm"), "signal"),
    (dict(grace=-1), "grace"),
    (dict(poll=0), "poll"),
    (dict(then="kill"), "then"),
    (dict(skip_signal=["--me"]), "skip_signal"),
    (dict(job_ids=["7;id"]), "job_ids"),
    (dict(job_ids=[]), "job_ids"),
    (dict(only_requeueable="yes"), "only_requeueable"),
    (dict(state="drained"), "state"),
])
def test_bad_input_names_the_field_and_asks_slurm_nothing(options, field):
    clock = Clock()
    slurm = FakeSlurm([Job("7")], clock)
    arguments = dict(options)
    node = arguments.pop("node", NODE)
    state = arguments.pop("state", "evacuated")
    with pytest.raises(FieldError) as bad:
        slurm_jobs(slurm, node, state, **arguments)
    assert bad.value.field == field
    assert slurm.calls == []


def test_listed_returns_the_jobs_on_the_node_and_changes_nothing():
    clock = Clock()
    slurm = FakeSlurm([Job("7"), Job("8", state="PENDING", node=""), Job("9", node="gpu-a-002"),
                       Job("10", state="SUSPENDED")], clock)
    result = list_jobs(slurm, NODE)
    assert result["changed"] is False and [job["job_id"] for job in result["jobs"]] == ["7", "10"]
    assert result["jobs"][0]["nodes"] == [NODE] and result["jobs"][0]["requeue"] is True
    assert slurm_jobs(slurm, NODE, "listed", signal="TERM", grace=1, poll=1, then="requeue",
                      skip_signal=[]) == result
    assert slurm.mutations() == []


@pytest.mark.parametrize("array_job_id, array_task_id, job_id, expected", [
    (12, 3, 15, "12_3"),
    (12, 0, 12, "12_0"),  # the task that carries the array's id: "12" would be every task
    (0, None, 4, "4"),  # 22.05, not an array
    ({"set": True, "infinite": False, "number": 12}, {"set": True, "infinite": False, "number": 3},
     {"set": True, "infinite": False, "number": 15}, "12_3"),  # 24.11
    ({"set": True, "infinite": False, "number": 0}, {"set": False, "infinite": False, "number": 0},
     {"set": True, "infinite": False, "number": 4}, "4"),
    (12, None, 12, "12"),  # a pending array not yet split
])
def test_array_tasks_are_named_by_their_task_id(array_job_id, array_task_id, job_id, expected):
    job = job_from_json({"job_id": job_id, "array_job_id": array_job_id, "array_task_id": array_task_id,
                         "job_state": "RUNNING", "nodes": NODE})
    assert job.job_id == expected


def test_job_ids_touch_those_jobs_alone_and_leave_the_nodes_others_running():
    """A stalled job's remediation (JOB_HANG): that job is signalled, waited for and requeued; the
    node's other jobs get no signal and keep running."""
    clock = Clock()
    slurm = FakeSlurm([Job("7"), Job("8"), Job("9", node="gpu-a-002")], clock)
    result = run(slurm, grace=5, poll=1, job_ids=["8", "9"])
    assert fates(result) == {"8": (True, REQUEUED, "PENDING")}
    assert result["command"] == [["scancel", "--signal=TERM", "--full", "8"], ["scontrol", "requeue", "8"]]
    assert {job.job_id: job.state for job in slurm.jobs_} == {"7": "RUNNING", "8": "PENDING", "9": "RUNNING"}
    assert [job["job_id"] for job in slurm_jobs(slurm, NODE, "listed", job_ids=["7"])["jobs"]] == ["7"]
    assert slurm_jobs(FakeSlurm([Job("7"), Job("8")], Clock()), NODE, "signalled", job_ids=["8"])["signalled"] == ["8"]


def test_only_requeueable_leaves_a_job_that_may_not_be_requeued_untouched():
    clock = Clock()
    slurm = FakeSlurm([Job("7"), Job("8", requeue=False)], clock)
    result = run(slurm, grace=2, poll=1, only_requeueable=True)
    assert fates(result) == {"7": (True, REQUEUED, "PENDING"), "8": (False, KEPT, "RUNNING")}
    assert [job["note"] for job in result["jobs"] if job["job_id"] == "8"] == [
        "not requeueable: not signalled, requeued or cancelled; left to its owner"]
    assert result["command"] == [["scancel", "--signal=TERM", "--full", "7"], ["scontrol", "requeue", "7"]]
    assert [call[1][-1] for call in slurm.mutations()] == ["7", "7"]
    alone = run(FakeSlurm([Job("8", requeue=False)], Clock()), only_requeueable=True)
    assert alone["changed"] is False and fates(alone) == {"8": (False, KEPT, "RUNNING")}
    signalled = slurm_jobs(FakeSlurm([Job("7"), Job("8", requeue=False)], Clock()), NODE, "signalled",
                           only_requeueable=True)
    assert signalled["signalled"] == ["7"]


def test_signalled_only_signals_and_does_not_wait():
    slurm = FakeSlurm([Job("7"), Job("8")], Clock())
    result = slurm_jobs(slurm, NODE, "signalled", skip_signal=["8"])
    assert result["signalled"] == ["7"] and result["waited"] == 0.0 and result["changed"] is True


def test_a_job_signalled_earlier_that_already_left_is_still_reported():
    clock = Clock()
    slurm = FakeSlurm([Job("7", node="gpu-a-009")], clock)
    result = run(slurm, grace=30, skip_signal=["7"])
    assert result["changed"] is False and fates(result) == {"7": (True, LEFT, "RUNNING")}


def test_a_job_whose_shell_dies_of_the_signal_ends_failed_and_is_requeued():
    """sbatch --wrap / a bash script: --full signals the shell too; it dies (WTERMSIG 15), the job
    ends FAILED and slurmctld does not requeue it. The remediation does, or the job is lost."""
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "FAILED"))], clock)
    result = run(slurm, grace=30, poll=1)
    assert fates(result) == {"7": (True, REQUEUED, "PENDING")}
    assert result["command"] == [["scancel", "--signal=TERM", "--full", "7"], ["scontrol", "requeue", "7"]]
    assert "ended FAILED on the signal" in result["jobs"][0]["note"]
    assert result["waited"] == 1.0  # it left at the first poll; no waiting for the grace


def test_a_job_that_exited_with_a_requeue_exit_code_is_left_to_slurmctld():
    """exit 75 after the checkpoint: 22.05's JSON reads FAILED (no REQUEUED flag) for a moment while
    slurmctld requeues it; a second requeue from us is not needed, and the report says so."""
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "FAILED"), exit_code=75)], clock)
    result = run(slurm, grace=30, poll=1)
    assert fates(result) == {"7": (True, LEFT, "FAILED")}
    assert [call[0] for call in slurm.mutations()] == ["signal"]
    assert result["jobs"][0]["note"] == "exited 75, a RequeueExit code: slurmctld requeues it"


def test_a_failed_job_slurm_flags_requeued_is_left_alone_and_other_exit_codes_are_requeued():
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "FAILED"), flags=("REQUEUED",)),
                       Job("8", on_signal=(0.5, "FAILED"), exit_code=1)], clock)
    result = run(slurm, grace=30, poll=1)
    assert fates(result) == {"7": (True, LEFT, "FAILED"), "8": (True, REQUEUED, "PENDING")}
    assert [call[0] for call in slurm.mutations()] == ["signal", "signal", "requeue"]


def test_the_requeue_exit_codes_are_read_once_and_only_for_a_failed_job():
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "COMPLETED"))], clock)
    run(slurm, grace=30, poll=1)
    assert ("requeue_exit_codes",) not in slurm.calls
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "FAILED"), exit_code=2), Job("8", on_signal=(0.5, "FAILED"))], clock)
    run(slurm, grace=30, poll=1)
    assert slurm.calls.count(("requeue_exit_codes",)) == 1


def test_jobs_that_end_completed_or_cancelled_in_the_grace_are_left_alone():
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "COMPLETED")), Job("8", on_signal=(0.5, "CANCELLED"))], clock)
    result = run(slurm, grace=30, poll=1)
    assert fates(result) == {"7": (True, LEFT, "COMPLETED"), "8": (True, LEFT, "CANCELLED")}
    assert [call[0] for call in slurm.mutations()] == ["signal", "signal"]


def test_a_non_requeueable_job_the_signal_killed_is_reported_not_requeued():
    clock = Clock()
    slurm = FakeSlurm([Job("7", requeue=False, on_signal=(0.5, "FAILED"))], clock)
    result = run(slurm, grace=30, poll=1)
    assert fates(result) == {"7": (True, LEFT, "FAILED")}
    assert [call[0] for call in slurm.mutations()] == ["signal"]
    assert "not requeueable" in result["jobs"][0]["note"] and "resubmit" in result["jobs"][0]["note"]


def test_a_refused_requeue_of_a_killed_job_is_reported():
    clock = Clock()
    slurm = FakeSlurm([Job("7", on_signal=(0.5, "FAILED"), refuse_requeue=True)], clock)
    result = run(slurm, grace=30, poll=1)
    assert fates(result) == {"7": (True, LEFT, "FAILED")}
    assert "requeue refused (Requeue of JobId=7" in result["jobs"][0]["note"]


def test_a_rerun_after_a_crash_requeues_a_killed_job_once():
    """The first run signalled 7 and crashed in the wait; 7's shell died of the signal meanwhile."""
    clock = Clock()
    slurm = FakeSlurm([Job("7", state="FAILED")], clock)
    first = run(slurm, grace=30, poll=1, skip_signal=["7"])
    assert fates(first) == {"7": (True, REQUEUED, "PENDING")}
    assert first["command"] == [["scontrol", "requeue", "7"]]
    again = run(slurm, grace=30, poll=1, skip_signal=["7"])
    assert fates(again) == {"7": (True, LEFT, "PENDING")} and again["command"] == []


def test_on_signalled_hears_every_signalled_job_before_the_first_wait():
    """The remediation records these as the jobs phase's intent: a crash in the wait must not signal them again."""
    clock = Clock()
    slurm = FakeSlurm([Job("7"), Job("8", on_signal=(0.1, "PENDING")), Job("9")], clock)
    heard = []

    def on_signalled(ids):
        heard.append((list(ids), list(clock.sleeps), [call[0] for call in slurm.mutations()]))

    result = run(slurm, grace=2, poll=1, skip_signal=["9"], on_signalled=on_signalled)
    assert heard == [(["7", "8"], [], ["signal", "signal"])]  # once, before any sleep or requeue
    assert result["signalled"] == ["7", "8"]
    # Nothing signalled (every job skipped): not called at all.
    heard.clear()
    run(FakeSlurm([Job("7")], Clock()), grace=0, skip_signal=["7"], on_signalled=on_signalled)
    assert heard == []


def test_a_grace_waited_in_slices_says_where_it_is_and_ends_as_one_wait_would():
    clock = Clock()
    slurm = FakeSlurm([Job("7"), Job("8", on_signal=(25, "PENDING"))], clock)
    first = run(slurm, grace=60, poll=5, return_after=20)
    assert first["done"] is False and first["grace_started"] == 100.0 and first["grace_left"] == 40.0
    assert first["signalled"] == ["7", "8"] and first["changed"] is True
    assert fates(first) == {"7": (True, None, "RUNNING"), "8": (True, None, "RUNNING")}
    assert not [call for call in slurm.mutations() if call[0] != "signal"]  # nothing requeued yet

    second = run(slurm, grace=60, poll=5, return_after=20, grace_started=first["grace_started"],
                 skip_signal=first["signalled"])
    assert second["done"] is False and second["signalled"] == [] and second["changed"] is False
    assert second["grace_left"] == 20.0 and fates(second)["8"][:2] == (True, LEFT)  # it left in the first slice

    last = run(slurm, grace=60, poll=5, return_after=20, grace_started=first["grace_started"],
               skip_signal=first["signalled"])
    assert last["done"] is True and last["grace_left"] == 0.0
    assert fates(last) == {"7": (True, REQUEUED, "PENDING"), "8": (True, LEFT, "PENDING")}
    assert sum(clock.sleeps) == pytest.approx(60)  # the grace once, not once per slice
    assert [call[0] for call in slurm.mutations()] == ["signal", "signal", "requeue"]


def test_a_slice_longer_than_what_is_left_of_the_grace_ends_with_the_grace():
    clock = Clock()
    slurm = FakeSlurm([Job("7")], clock)
    started = clock.now - 50  # an earlier slice began the 60 s grace 50 s ago
    result = run(slurm, grace=60, poll=5, return_after=30, grace_started=started, skip_signal=["7"])
    assert result["done"] is True and sum(clock.sleeps) == pytest.approx(10)
    assert fates(result) == {"7": (True, REQUEUED, "PENDING")}
