"""parse_squeue on the captures: --json of 22.05 (v0.0.38) and 24.11 (v0.0.40+), and text."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmParseError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import parse_jobs_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_squeue import (
    SQUEUE_FORMAT,
    filter_jobs,
    job_from_json,
    jobs_by_node,
    parse_jobs_json,
    parse_squeue_default,
    parse_squeue_text,
)

VERSIONS = ("22.05", "24.11", "26.05")
TRAIN = {"22.05": "4", "24.11": "1", "26.05": "1"}


@pytest.mark.parametrize("version", VERSIONS)
def test_json(captures, version):
    jobs = {job.job_id: job for job in parse_jobs_json(captures.text(version + "/squeue.json"))}
    train = jobs[TRAIN[version]]
    assert (train.name, train.state, train.flags, train.nodes) == ("train", "RUNNING", (), ("gpu-a-001",))
    assert (train.requeue, train.restarts, train.batch_host, train.user) == (True, 0, "gpu-a-001", "root")
    pending = [job for job in jobs.values() if job.state == "PENDING"]
    assert pending and all(job.nodes == () for job in pending)
    assert {job.reason for job in pending} <= {"Resources", "Priority"}


@pytest.mark.parametrize("exit_code, expected", [
    (75 << 8, 75),  # v0.0.38: the raw wait status of `exit 75`
    (15, None),  # v0.0.38: died of SIGTERM
    ({"status": ["EXITED"], "return_code": {"set": True, "infinite": False, "number": 75},
      "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}}, 75),
    ({"status": ["SIGNALED"], "return_code": {"set": True, "infinite": False, "number": 0},
      "signal": {"id": {"set": True, "infinite": False, "number": 15}, "name": "TERM"}}, None),
])
def test_the_exit_code_of_a_finished_job_from_either_json_layout(exit_code, expected):
    finished = job_from_json({"job_id": 7, "job_state": "FAILED", "exit_code": exit_code})
    assert finished.exit_code == expected
    running = job_from_json({"job_id": 7, "job_state": ["RUNNING"], "exit_code": exit_code})
    assert running.exit_code is None


@pytest.mark.parametrize("version", VERSIONS)
def test_json_agrees_with_scontrol_show_job(captures, version):
    from_json = parse_jobs_json(captures.text(version + "/squeue.json"))
    from_text = parse_jobs_text(captures.text(version + "/scontrol_show_job_oneliner.txt"))
    assert sorted(from_json, key=lambda job: job.job_id) == sorted(from_text, key=lambda job: job.job_id)


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_scontrol_show_job_json(captures, version):
    assert parse_jobs_json(captures.text(version + "/scontrol_show_job.json"), "scontrol show job --json") == \
        parse_jobs_json(captures.text(version + "/squeue.json"))


def test_slurmrestd_26_05_jobs_equal_the_cli(captures):
    assert parse_jobs_json(captures.text("26.05/rest/jobs.json"), "slurmrestd GET /jobs") == \
        parse_jobs_json(captures.text("26.05/squeue.json"))


def test_22_05_scontrol_show_job_has_no_json(captures):
    with pytest.raises(SlurmParseError, match="not JSON"):
        parse_jobs_json(captures.text("22.05/scontrol_show_job.json"))


@pytest.mark.parametrize("version", VERSIONS)
def test_default_table(captures, version):
    jobs = {job.job_id: job for job in parse_squeue_default(captures.text(version + "/squeue.txt"))}
    assert jobs[TRAIN[version]].state == "RUNNING" and jobs[TRAIN[version]].nodes == ("gpu-a-001",)
    assert {job.reason for job in jobs.values() if job.state == "PENDING"} <= {"Resources", "Priority"}


@pytest.mark.parametrize("version", VERSIONS)
def test_requeued_job_after_node_down(captures, version):
    """The node went DOWN: its --requeue job is PENDING again, waiting with reason BeginTime."""
    jobs = parse_squeue_text(captures.text(version + "/squeue_after_down.txt"),
                             fields=("job_id", "name", "state", "reason", "nodelist", "nice"), sep=" ",
                             free_field="reason")
    train = next(job for job in jobs if job.name == "train")
    assert (train.job_id, train.state, train.reason, train.nodes) == (TRAIN[version], "PENDING", "BeginTime", ())
    blocked = next(job for job in jobs if job.name == "pending-big")
    assert blocked.reason.startswith("Nodes required for job are DOWN, DRAINED")


def test_fixed_format_keeps_the_name_whole():
    assert SQUEUE_FORMAT == "%i|%T|%r|%P|%u|%N|%j"
    jobs = parse_squeue_text("12|RUNNING|None|gpu|alice|gpu-a-[001-002,004]|a | b | c\n"
                             "13|PENDING|Priority|gpu|bob||x\n")
    assert jobs[0].name == "a | b | c" and jobs[0].nodes == ("gpu-a-001", "gpu-a-002", "gpu-a-004")
    assert jobs[1].reason == "Priority" and jobs[1].nodes == ()


def test_fixed_format_refuses_short_lines():
    with pytest.raises(SlurmParseError):
        parse_squeue_text("12|RUNNING\n")


def test_filters():
    jobs = [SlurmJob("1", "RUNNING", nodes=("a", "b")), SlurmJob("2", "PENDING"),
            SlurmJob("3", "COMPLETED", flags=("COMPLETING",), nodes=("b",)), SlurmJob("4", "COMPLETED", nodes=("a",))]
    assert [job.job_id for job in filter_jobs(jobs)] == ["1", "2", "3"]
    assert [job.job_id for job in filter_jobs(jobs, nodes=["b"])] == ["1", "3"]
    assert [job.job_id for job in filter_jobs(jobs, states=["completed"])] == ["3", "4"]
    assert [job.job_id for job in filter_jobs(jobs, states=["COMPLETING"])] == ["3"]
    assert {node: [job.job_id for job in held] for node, held in jobs_by_node(jobs).items()} == {
        "a": ["1"], "b": ["1", "3"]}
