"""SlurmClient over SlurmRunner: the argv, env and result of every call, from test_client.yaml.

Only our run function is faked: it checks each command line and environment and answers with
Slurm's own (captured) output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
import yaml

from ansible_collections.gpufleet.resilience.plugins.module_utils import errors as base_errors
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm import errors as slurm_errors
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import CommandResult, SlurmRunner

CASES = yaml.safe_load((Path(__file__).with_suffix(".yaml")).read_text())
ERRORS = {name: getattr(module, name) for module in (slurm_errors, base_errors) for name in dir(module)
          if isinstance(getattr(module, name), type)}


class FakeRun:
    """A run function that expects the case's commands in order."""

    def __init__(self, mocks: List[Dict[str, Any]], captures) -> None:
        self.mocks = list(mocks)
        self.captures = captures
        self.calls: List[List[str]] = []

    def _text(self, mock: Dict[str, Any], key: str) -> str:
        if key + "_file" in mock:
            return self.captures().text(mock[key + "_file"])
        return mock.get(key, "")

    def __call__(self, argv: List[str], env: Dict[str, str], timeout: Optional[float]):
        self.calls.append(argv)
        assert self.mocks, "unexpected command %s" % argv
        mock = self.mocks.pop(0)
        assert argv == mock["argv"]
        assert env == mock["env"]
        if "timeout" in mock:
            assert timeout == mock["timeout"]
        if mock.get("raise") == "timeout":
            raise TimeoutError("timed out after %ss" % timeout)
        if mock.get("raise") == "oserror":
            raise FileNotFoundError(2, "No such file or directory", argv[0])
        return mock["rc"], self._text(mock, "out"), self._text(mock, "err")


def _subset(expected: Any, actual: Any, where: str = "result") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: %r is not a dict" % (where, actual)
        for key, value in expected.items():
            assert key in actual, "%s: no key %r in %r" % (where, key, actual)
            _subset(value, actual[key], "%s.%s" % (where, key))
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        assert len(actual) == len(expected), "%s: %r" % (where, actual)
        for index, (want, got) in enumerate(zip(expected, actual, strict=True)):
            _subset(want, got, "%s[%d]" % (where, index))
    else:
        assert actual == expected, "%s: %r != %r" % (where, actual, expected)


def _plain(result: Any) -> Any:
    if isinstance(result, CommandResult):
        return result.as_dict()
    if isinstance(result, dict):
        return {name: node.as_dict() for name, node in result.items()}
    if isinstance(result, list):
        return [item.as_dict() if hasattr(item, "as_dict") else item for item in result]
    return str(result)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_client_call(case, request):
    def captures():
        return request.getfixturevalue("captures")

    run = FakeRun(case["mocks"]["run"], captures)
    client = SlurmClient(SlurmRunner(run=run, **case.get("runner", {})))
    call = getattr(client, case["input"]["call"])
    expected_error = case.get("exception")
    if expected_error:
        error_type = ERRORS[expected_error["type"]]
        with pytest.raises(error_type) as caught:
            call(**case["input"].get("args", {}))
        error = caught.value
        assert type(error).__name__ == expected_error["type"]  # not a subclass of it
        for key, value in expected_error.items():
            if key == "type":
                continue
            if key == "message_contains":
                assert value in str(error)
            elif key == "stderr_contains":
                assert value in error.stderr
            else:
                assert getattr(error, key) == value, key
        if isinstance(error, slurm_errors.SlurmCommandError):
            assert error.details()["cmd"] == error.argv
    else:
        result = _plain(call(**case["input"].get("args", {})))
        if "output_names" in case:
            assert list(result) == case["output_names"]
        if "output" in case:
            _subset(case["output"], result)
    assert not run.mocks, "commands not run: %s" % [mock["argv"] for mock in run.mocks]


def test_version_is_asked_once():
    answers = {"scontrol --version": "slurm 24.11.5\n"}
    seen = []

    def run(argv, env, timeout):
        seen.append(" ".join(argv))
        return 0, answers[" ".join(argv)], ""

    runner = SlurmRunner(run=run)
    assert runner.has_json("scontrol") and runner.has_json("squeue")
    assert str(runner.version()) == "24.11.5"
    assert seen == ["scontrol --version"]


def test_json_by_version():
    def runner_for(version):
        return SlurmRunner(run=lambda argv, env, timeout: (0, "slurm %s\n" % version, ""))

    assert [runner_for("22.05.8").has_json(cmd) for cmd in ("scontrol", "sinfo", "squeue")] == [False, True, True]
    assert [runner_for("24.11.5").has_json(cmd) for cmd in ("scontrol", "sinfo", "squeue")] == [True, True, True]
    assert [runner_for("20.11.9").has_json(cmd) for cmd in ("scontrol", "sinfo", "squeue")] == [False, False, False]
    assert runner_for("24.11.5").has_json("scancel") is False


def test_argv_refuses_undeclared_options():
    runner = SlurmRunner(run=lambda argv, env, timeout: (0, "", ""))
    with pytest.raises(ValueError, match="not declared"):
        runner.argv("scontrol", "action nodes", action=["show"])
    with pytest.raises(ValueError, match="not placed"):
        runner.argv("scancel", "job_ids", job_ids=["1"], signal="TERM")
    with pytest.raises(ValueError, match="no formats"):
        runner.argv("srun", "")


def test_a_batch_job_is_sbatch_wrap_and_its_batch_step_killed_with_scancel_batch():
    env = {"LC_ALL": "C", "SLURM_CONF": "/lab/slurm.conf"}
    run = FakeRun([
        {"argv": ["/lab/bin/sbatch", "--parsable", "-w", "gpu-a-002", "--gres=gpu:2", "--time=3",
                  "--job-name=gpufleet-chaos-burn-f1", "--output=/scratch/burn.out", "--wrap",
                  "gpu_burn -d -m 90% 60"], "env": env, "rc": 0, "out": "31;gpufleet-lab\n"},
        {"argv": ["/lab/bin/scancel", "--signal=KILL", "--batch", "--full", "31"], "env": env, "rc": 0},
        {"argv": ["/lab/bin/scontrol", "--oneliner", "show", "job", "31"], "env": env, "rc": 0,
         "out": "JobId=31 JobName=x WorkDir=/tmp StdErr=/scratch/burn.out StdIn=/dev/null StdOut=/scratch/burn.out\n"},
    ], captures=None)
    client = SlurmClient(SlurmRunner(run=run, slurm_conf="/lab/slurm.conf", bin_dir="/lab/bin"))
    job = BatchJob(name="gpufleet-chaos-burn-f1", node="gpu-a-002", command=("gpu_burn", "-d", "-m", "90%", "60"),
                   minutes=3, output="/scratch/burn.out", gpus=2)
    job_id, result = client.submit(job)
    assert (job_id, result.ran) == ("31", True)
    client.signal_jobs(["31"], "KILL", batch=True)
    assert client.job_stdout("31") == "/scratch/burn.out"
    assert not run.mocks
    # Check mode runs no sbatch; sbatch printing no job id is an error naming the job.
    dry = SlurmClient(SlurmRunner(run=FakeRun([], captures=None), check_mode=True))
    assert dry.submit(job)[0] is None
    silent = SlurmClient(SlurmRunner(run=lambda argv, env, timeout: (0, "\n", "")))
    with pytest.raises(base_errors.GpufleetError, match="gpufleet-chaos-burn-f1"):
        silent.submit(job)
