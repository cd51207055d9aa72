"""parse_squeue on the captures: --json of 22.05 (v0.0.38) and 24.11 (v0.0.40+), and text."""

from __future__ import annotations

import time

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
    assert SQUEUE_FORMAT == "%i|%T|%r|%P|%u|%N|%b|%D|%S|%j"
    jobs = parse_squeue_text("12|RUNNING|None|gpu|alice|gpu-a-[001-002,004]|gres/gpu:8|3|2026-12-06T02:30:00|"
                             "a | b | c\n"
                             "13|PENDING|Priority|gpu|bob||gres:gpu:h100:2|1|2026-12-07T00:00:00|x\n"
                             "14|RUNNING|None|cpu|carol|cpu-001|N/A|1|N/A|y\n")
    assert jobs[0].name == "a | b | c" and jobs[0].nodes == ("gpu-a-001", "gpu-a-002", "gpu-a-004")
    assert jobs[0].gpus == 24 and jobs[0].start_time == time.mktime((2026, 12, 6, 2, 30, 0, 0, 0, -1))
    # A pending job's %S is Slurm's guess at its start, not a start.
    assert jobs[1].reason == "Priority" and jobs[1].nodes == () and (jobs[1].gpus, jobs[1].start_time) == (2, None)
    assert (jobs[2].gpus, jobs[2].start_time) == (None, None)


@pytest.mark.parametrize("fields, gpus", [
    ({"gres_detail": ["gpu:8(IDX:0-7)", "gpu:h100:8(IDX:0-7)"], "tres_per_node": "gres/gpu:8", "node_count": 2}, 16),
    ({"tres_per_job": "gres/gpu:12", "tres_per_node": "", "node_count": 2}, 12),
    ({"tres_per_node": "gres/gpu:4", "node_count": {"set": True, "infinite": False, "number": 3}}, 12),
    ({"tres_per_node": "", "tres_alloc_str": "cpu=1,node=1"}, None),
])
def test_a_jobs_gpus_from_json(fields, gpus):
    assert job_from_json(dict(fields, job_id=7, job_state=["RUNNING"])).gpus == gpus


@pytest.mark.parametrize("version", VERSIONS)
def test_a_running_jobs_gpus_and_start_from_the_captures(captures, version):
    train = {job.job_id: job for job in parse_jobs_json(captures.text(version + "/squeue.json"))}[TRAIN[version]]
    assert train.gpus == 1 and train.start_time > 1.7e9


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
