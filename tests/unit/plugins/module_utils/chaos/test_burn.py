# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The burn family: gpu-burn and dcgmi diag parsers, the sbatch argv, the Pod manifest, the lab's
simulated burn against a real fake GPU state directory, and its exact rollback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import burn
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import burn_output as outputs
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import ApiException
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state as fgs
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmCommandError

NODE = "gpu-a-003"
PRODUCT = "NVIDIA-H100-80GB-HBM3"


def spec(**params: Any) -> Dict[str, Any]:
    return {"experiment": "gpu_burn", "node": NODE, "backend": "default", "fault_id": "f-1a2b", "params": params}


# ---------------------------------------------------------------- gpu-burn output

BURN_HEADER = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0c6e4a57-0000-0000-0000-000000000000)\n"
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-0c6e4a57-0000-0000-0000-000000000001)\n"
    "Initialized device 0 with 81090 MB of memory (80560 MB available, using 72504 MB of it), using DOUBLES\n"
    "Initialized device 1 with 81090 MB of memory (80560 MB available, using 72504 MB of it), using DOUBLES\n"
)
PROGRESS_50 = "50.0%  proc'd: 1200 (41210 Gflop/s) - 1140 (40871 Gflop/s)   errors: 0 - 0   temps: 61 C - 63 C \n"
SUMMARY = "\tSummary at:   Mon Nov 30 10:00:00 UTC 2026\n\n"


def burn_output(progress_end: str, results: str) -> str:
    return BURN_HEADER + PROGRESS_50 + SUMMARY + progress_end + "Killing processes.. done\n\n" + results


def test_gpu_burn_all_ok() -> None:
    text = burn_output(
        "100.0%  proc'd: 2400 (41002 Gflop/s) - 2310 (40512 Gflop/s)   errors: 0 - 0   temps: 66 C - 68 C \n",
        "Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n")
    result = outputs.parse_gpu_burn(text)
    assert result["gpus"] == {0: "OK", 1: "OK"}
    assert result["faulty"] == []
    assert result["verdict"] == "ok"
    assert result["tested"] == 2
    assert result["errors"] == [0, 0]
    assert result["gflops"] == [41002.0, 40512.0]
    assert result["processed"] == [2400, 2310]
    assert result["temps"] == [66, 68]
    assert result["progress"] == 100.0
    # The header lines "GPU 0: NVIDIA H100 ..." are not results.
    assert len(result["gpus"]) == 2


def test_gpu_burn_one_faulty_although_it_exits_0() -> None:
    text = burn_output(
        "100.0%  proc'd: 2400 (41002 Gflop/s) - 2310 (40512 Gflop/s)   errors: 0 - 7  (WARNING!)  "
        "temps: 66 C - 71 C \n",
        "Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: FAULTY\n")
    result = outputs.parse_gpu_burn(text)
    assert result["gpus"] == {0: "OK", 1: "FAULTY"}
    assert result["faulty"] == [1]
    assert result["errors"] == [0, 7]
    assert result["verdict"] == "faulty"
    assert "1" in result["reasons"][0]


def test_gpu_burn_without_result_lines_is_unknown_never_ok() -> None:
    # Cut off before the summary (killed by the time limit, or the log was truncated).
    result = outputs.parse_gpu_burn(BURN_HEADER + PROGRESS_50 + SUMMARY)
    assert result["gpus"] == {} and result["faulty"] == []
    assert result["verdict"] == "unknown"
    assert outputs.parse_gpu_burn("")["verdict"] == "unknown"


def test_gpu_burn_progress_line_alone() -> None:
    line = "100.0%  proc'd: 1234 (4567 Gflop/s) - 0 (0 Gflop/s)   errors: 0 - 3   temps: 65 C - 66 C"
    result = outputs.parse_gpu_burn(line)
    assert result["processed"] == [1234, 0]
    assert result["gflops"] == [4567.0, 0.0]
    assert result["errors"] == [0, 3]
    assert result["temps"] == [65, 66]
    assert result["progress"] == 100.0
    assert result["verdict"] == "unknown"


def test_gpu_burn_progress_the_last_record_counts_and_carriage_returns_split_records() -> None:
    text = ("10.0%  proc'd: 100 (40000 Gflop/s)   errors: 0   temps: 50 C \r"
            "20.0%  proc'd: 200 (41000 Gflop/s)   errors: 2   temps: 55 C \r"
            "Tested 1 GPUs:\n        GPU 0: FAULTY\n")
    result = outputs.parse_gpu_burn(text)
    assert result["progress"] == 20.0 and result["errors"] == [2] and result["temps"] == [55]
    assert result["faulty"] == [0] and result["verdict"] == "faulty"


def test_gpu_burn_negative_error_counts_and_died_processes() -> None:
    text = ("Couldn't init a GPU test: Error in \"load module\": \n"
            "100.0%  proc'd: -1 (0 Gflop/s) - 0 (0 Gflop/s)   errors: -5242880  (DIED!)- 0   temps: 33 C - 29 C \n"
            "Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n")
    result = outputs.parse_gpu_burn(text)
    assert result["errors"] == [-5242880, 0]
    assert result["died"] == [0]
    assert result["processed"] == [-1, 0]
    # Every GPU printed OK, yet a test never ran: not a pass.
    assert result["verdict"] == "error"
    assert any("Couldn't init" in reason for reason in result["reasons"])


def test_gpu_burn_fewer_results_than_tested_is_unknown() -> None:
    result = outputs.parse_gpu_burn("Tested 4 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n")
    assert result["verdict"] == "unknown"


def test_parse_output_dispatches_on_the_tool() -> None:
    assert outputs.parse_output("Tested 1 GPUs:\n\tGPU 0: OK\n")["verdict"] == "ok"
    assert outputs.parse_output("", "dcgm_diag")["verdict"] == "unknown"
    with pytest.raises(FieldError) as err:
        outputs.parse_output("", "stress")
    assert err.value.field == "tool"


# ---------------------------------------------------------------- dcgmi diag -r 3 output

BORDER = "+---------------------------+------------------------------------------------+"


def diag_row(name: str, value: str) -> str:
    return "| %-25s | %-46s |" % (name, value)


def diag_section(name: str, first: str = "+") -> str:
    head = "%s-----  %s  " % (first, name)
    return head + "-" * (28 - len(head)) + "+" + "-" * 48 + ("+" if first == "+" else "|")


DIAG_3X = "\n".join([
    "Successfully ran diagnostic for group.",
    BORDER,
    diag_row("Diagnostic", "Result"),
    BORDER.replace("-", "="),
    diag_section("Metadata", "|"),
    diag_row("DCGM Version", "3.3.5"),
    diag_row("Driver Version Detected", "550.54.15"),
    diag_section("Deployment", "|"),
    diag_row("Denylist", "Pass"),
    diag_row("Inforom", "Pass"),
    diag_section("Integration"),
    diag_row("PCIe", "Pass - All"),
    diag_row("Info", "GPU 0 GPU to Host bandwidth:  14.26 GB/s"),
    diag_section("Hardware"),
    diag_row("GPU Memory", "Pass - GPU: 1"),
    diag_row("", "Fail - GPU: 0"),
    # A long warning, cut into rows of 45 characters, mid-word.
    diag_row("Warning", "GPU 0 Error using CUDA API cuCtxCreate Check "),
    diag_row("", "DCGM and system logs for errors. Reset GPU. R"),
    diag_row("", "estart DCGM."),
    diag_row("Diagnostic", "Warn - All"),
    diag_section("Stress"),
    diag_row("Targeted Stress", "Pass - All"),
    diag_row("Targeted Power", "Skip - All"),
    BORDER,
])

DIAG_4X = "\n".join([
    "Successfully ran diagnostic for group.",
    BORDER,
    diag_row("Diagnostic", "Result"),
    BORDER.replace("-", "="),
    diag_section("Metadata", "|"),
    diag_row("DCGM Version", "4.2.3"),
    diag_section("Deployment", "|"),
    diag_row("software", "Pass"),
    diag_row("", "GPU0: Pass"),
    diag_row("", "GPU1: Pass"),
    diag_section("Hardware"),
    diag_row("memory", "Pass"),
    diag_row("", "GPU0: Pass"),
    diag_row("", "GPU1: Pass"),
    diag_section("Stress"),
    diag_row("targeted_power", "Pass"),
    diag_row("", "GPU0: Pass"),
    diag_row("", "GPU1: Pass"),
    BORDER,
])


def test_dcgm_diag_3x_per_gpu_results_details_and_verdict() -> None:
    result = outputs.parse_dcgm_diag(DIAG_3X)
    tests = {test["name"]: test for test in result["tests"]}
    assert list(tests) == ["Denylist", "Inforom", "PCIe", "GPU Memory", "Diagnostic", "Targeted Stress",
                           "Targeted Power"]
    assert result["metadata"] == {"DCGM Version": "3.3.5", "Driver Version Detected": "550.54.15"}
    # "Inforom" is a test, not an Info detail row.
    assert tests["Inforom"]["result"] == "Pass"
    assert tests["PCIe"]["info"] == ["GPU 0 GPU to Host bandwidth: 14.26 GB/s"]
    memory = tests["GPU Memory"]
    assert memory["result"] == "Fail" and memory["gpus"] == {1: "Pass", 0: "Fail"}
    assert memory["section"] == "Hardware"
    assert memory["warnings"] == ["GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. "
                                  "Reset GPU. Restart DCGM."]
    assert tests["Diagnostic"]["result"] == "Warn"
    assert result["failed"] == ["GPU Memory"]
    assert result["warned"] == ["Diagnostic"]
    assert result["skipped"] == ["Targeted Power"]
    assert result["verdict"] == "fail"


def test_dcgm_diag_4x_all_pass() -> None:
    result = outputs.parse_dcgm_diag(DIAG_4X)
    assert [test["name"] for test in result["tests"]] == ["software", "memory", "targeted_power"]
    assert all(test["gpus"] == {0: "Pass", 1: "Pass"} for test in result["tests"])
    assert result["verdict"] == "pass"


def test_dcgm_diag_4x_one_gpu_failing_fails_the_test() -> None:
    text = DIAG_4X.replace(diag_row("", "GPU1: Pass") + "\n" + diag_section("Stress"),
                           diag_row("", "GPU1: Fail") + "\n" + diag_section("Stress"))
    result = outputs.parse_dcgm_diag(text)
    assert result["failed"] == ["memory"]
    assert result["verdict"] == "fail"


def test_dcgm_diag_nothing_run_or_all_skipped_is_unknown() -> None:
    assert outputs.parse_dcgm_diag("Error: unable to establish a connection to the host engine.") == {
        "tool": "dcgm_diag", "tests": [], "failed": [], "warned": [], "passed": [], "skipped": [], "metadata": {},
        "errors": ["Error: unable to establish a connection to the host engine."], "verdict": "unknown"}
    skipped = "\n".join([BORDER, diag_section("Stress"), diag_row("Targeted Stress", "Skip - All"), BORDER])
    assert outputs.parse_dcgm_diag(skipped)["verdict"] == "unknown"


# ---------------------------------------------------------------- checking the spec


@pytest.mark.parametrize("params, field", [
    ({"seconds": None}, "params.seconds"),
    ({"seconds": 0}, "params.seconds"),
    ({"seconds": 86401}, "params.seconds"),
    ({"seconds": True}, "params.seconds"),
    ({"seconds": "soon"}, "params.seconds"),
    ({"seconds": 60, "gpus": []}, "params.gpus"),
    ({"seconds": 60, "gpus": [0, 0]}, "params.gpus"),
    ({"seconds": 60, "gpus": [-1]}, "params.gpus"),
    ({"seconds": 60, "gpus": "some"}, "params.gpus"),
    ({"seconds": 60, "via": "ssh"}, "params.via"),
    ({"seconds": 60, "tool": "stress"}, "params.tool"),
    ({"seconds": 60, "memory_percent": 0}, "params.memory_percent"),
    ({"seconds": 60, "memory_percent": 101}, "params.memory_percent"),
    ({"seconds": 60, "tensor_cores": "maybe"}, "params.tensor_cores"),
    ({"seconds": 60, "tool": "dcgm_diag", "tensor_cores": True}, "params.tensor_cores"),
    ({"seconds": 60, "tool": "dcgm_diag", "memory_percent": 50}, "params.memory_percent"),
    ({"seconds": 60, "via": "slurm", "neighbour_job": True}, "params.neighbour_job"),
    ({"seconds": 60, "via": "kubernetes"}, "params.image"),
    ({"seconds": 60, "via": "kubernetes", "image": "img", "namespace": "Bad_NS"}, "params.namespace"),
    ({"seconds": 60, "via": "slurm", "image": "img"}, "params.image"),
    ({"seconds": 60, "via": "slurm", "output": "relative.out"}, "params.output"),
    ({"seconds": 60, "via": "lab", "output": "/tmp/x.out"}, "params.output"),
    ({"seconds": 60, "duration": 5}, "params.duration"),
])
def test_bad_params_name_their_field(params: Dict[str, Any], field: str) -> None:
    with pytest.raises(FieldError) as err:
        burn.plan(spec(**params))
    assert err.value.field == field


@pytest.mark.parametrize("change, field", [
    ({"node": "--all"}, "target"),
    ({"node": "gpu-a-[001-003]"}, "target"),
    ({"fault_id": "a b"}, "fault_id"),
    ({"fault_id": "x" * 64}, "fault_id"),
    ({"experiment": "gpu_xid"}, "experiment"),
    ({"backend": "nvml_sim"}, "backend"),
])
def test_bad_spec_names_its_field(change: Dict[str, Any], field: str) -> None:
    with pytest.raises(FieldError) as err:
        burn.plan(dict(spec(seconds=60), **change))
    assert err.value.field == field


def test_defaults_and_normalised_params() -> None:
    checked = burn.check_spec(spec(seconds="120", gpus=["1", 0], tensor_cores="yes"), lab=False)
    assert checked.seconds == 120 and checked.gpus == (0, 1) and checked.tensor_cores is True
    assert checked.via == "slurm"  # a real site's default
    assert checked.memory_percent == 90 and checked.tool == "gpu_burn"
    assert burn.check_spec(spec(seconds=60), lab=True).via == "lab"
    assert burn.check_spec(dict(spec(seconds=60), backend="kubernetes", params={"seconds": 60, "image": "i"})).via \
        == "kubernetes"
    assert checked.minutes == 3  # 120 s burn + 60 s start-up, in whole minutes


def test_inject_via_lab_needs_a_lab() -> None:
    with pytest.raises(FieldError) as err:
        burn.inject(spec(seconds=60, via="lab"), FaultContext())
    assert err.value.field == "params.via"


# ---------------------------------------------------------------- commands and manifest


def test_burn_commands() -> None:
    assert burn.burn_command(burn.check_spec(spec(seconds=300), lab=False)) == ["gpu_burn", "-d", "-m", "90%", "300"]
    assert burn.burn_command(burn.check_spec(spec(seconds=300, tensor_cores=True, memory_percent=50), lab=False)) == [
        "gpu_burn", "-d", "-tc", "-m", "50%", "300"]
    assert burn.burn_command(burn.check_spec(spec(seconds=300, tool="dcgm_diag"), lab=False)) == [
        "dcgmi", "diag", "-r", "3"]


def test_sbatch_argv() -> None:
    checked = burn.check_spec(spec(seconds=600, gpus=[2, 3], via="slurm"))
    assert burn.sbatch_argv(checked, 2) == [
        "sbatch", "--parsable", "-w", NODE, "--gres=gpu:2", "--time=11", "--job-name=gpufleet-chaos-burn-f-1a2b",
        "--output=/tmp/gpufleet-chaos-burn-f-1a2b.out", "--wrap", "gpu_burn -d -m 90% 600"]
    diag = burn.check_spec(spec(seconds=60, via="slurm", tool="dcgm_diag", output="/scratch/burn.out"))
    assert burn.sbatch_argv(diag, 8, bin_dir="/opt/slurm/bin") == [
        "/opt/slurm/bin/sbatch", "--parsable", "-w", NODE, "--gres=gpu:8", "--time=2",
        "--job-name=gpufleet-chaos-burn-f-1a2b", "--output=/scratch/burn.out", "--wrap", "dcgmi diag -r 3"]


def test_plan_via_slurm_lists_the_exact_command() -> None:
    result = burn.plan(spec(seconds=600, gpus=[0], via="slurm"))
    assert result["commands"] == [burn.sbatch_argv(burn.check_spec(spec(seconds=600, gpus=[0], via="slurm")), 1)]
    assert "sbatch --parsable -w gpu-a-003 --gres=gpu:1 --time=11" in result["actions"][0]
    assert "--wrap 'gpu_burn -d -m 90% 600'" in result["actions"][0]
    assert result["simulated"] == [] and result["missing"] == []
    everything = burn.plan(spec(seconds=60, via="slurm", tool="dcgm_diag"))
    assert "<every GPU of gpu-a-003" in everything["actions"][0]
    assert any("15 minutes" in action for action in everything["actions"])


def test_pod_manifest() -> None:
    checked = burn.check_spec(spec(seconds=300, gpus=[0, 1], via="kubernetes", image="registry.local/gpu-burn:1",
                                   tensor_cores=True))
    assert burn.pod_manifest(checked, 2) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpufleet-chaos-burn-f-1a2b",
            "namespace": "gpufleet-chaos",
            "labels": {"app.kubernetes.io/managed-by": "gpufleet.resilience", "gpufleet.io/chaos-fault": "f-1a2b",
                       "gpufleet.io/chaos-experiment": "gpu-burn"},
        },
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 360,
            "terminationGracePeriodSeconds": 5,
            "tolerations": [{"key": "gpufleet.io/gpu-unhealthy", "operator": "Exists"},
                            {"key": "nvidia.com/gpu", "operator": "Exists"}],
            "containers": [{
                "name": "burn",
                "image": "registry.local/gpu-burn:1",
                "command": ["gpu_burn", "-d", "-tc", "-m", "90%", "300"],
                "resources": {"limits": {"nvidia.com/gpu": 2}},
            }],
        },
    }
    assert burn.plan(spec(seconds=300, gpus=[0, 1], via="kubernetes", image="registry.local/gpu-burn:1",
                          tensor_cores=True))["manifest"] == burn.pod_manifest(checked, 2)


def test_pod_name_is_dns_1123() -> None:
    assert burn.pod_name("F_20261130.Ab") == "gpufleet-chaos-burn-f-20261130-ab"
    assert len(burn.pod_name("a" * 63)) <= 63


# ---------------------------------------------------------------- via slurm (fake run function)


class FakeSlurm:
    """Answers the runner like a Slurm without --json would (scontrol and squeue text)."""

    def __init__(self, jobs: Optional[List[Tuple[str, str, str]]] = None, sbatch_out: str = "4242\n",
                 scancel_err: Optional[str] = None, gres: str = "gpu:8") -> None:
        self.calls: List[List[str]] = []
        self.envs: List[Dict[str, str]] = []
        self.jobs = jobs or []  # (id, state, name)
        self.sbatch_out = sbatch_out
        self.scancel_err = scancel_err
        self.gres = gres

    def __call__(self, argv: List[str], env: Dict[str, str], timeout: Optional[float]) -> Tuple[int, str, str]:
        self.calls.append(list(argv))
        self.envs.append(dict(env))
        command = os.path.basename(argv[0])
        if command == "scontrol" and "--version" in argv:
            return 0, "slurm-wlm 20.11.9\n", ""
        if command == "scontrol":
            return 0, "NodeName=%s Arch=x86_64 CoresPerSocket=1 Gres=%s State=MIXED Partitions=gpu\n" % (
                NODE, self.gres), ""
        if command == "squeue":
            return 0, "".join("%s|%s|None|gpu|root|%s|gres/gpu:8|1|N/A|%s\n" % (job_id, state, NODE, name)
                              for job_id, state, name in self.jobs), ""
        if command == "sbatch":
            return 0, self.sbatch_out, ""
        if command == "scancel":
            if self.scancel_err:
                return 1, "", self.scancel_err
            return 0, "", ""
        raise AssertionError("unexpected command %r" % argv)

    def commands(self, name: str) -> List[List[str]]:
        return [call for call in self.calls if os.path.basename(call[0]) == name]


def slurm_ctx(fake: FakeSlurm, **extra: Any) -> Dict[str, Any]:
    return FaultContext.of(**dict({"lab_dir": None, "slurm_conf": "/lab/slurm/slurm.conf", "check_mode": False,
                                   "run": fake}, **extra))


def test_inject_via_slurm_submits_and_revert_cancels() -> None:
    fake = FakeSlurm()
    undo = burn.inject(spec(seconds=600, gpus=[0, 1], via="slurm"), slurm_ctx(fake))
    assert fake.commands("sbatch") == [burn.sbatch_argv(burn.check_spec(spec(seconds=600, gpus=[0, 1], via="slurm")),
                                                        2)]
    assert fake.envs[0] == {"LC_ALL": "C", "SLURM_CONF": "/lab/slurm/slurm.conf"}
    assert undo["job_id"] == "4242" and undo["job_name"] == "gpufleet-chaos-burn-f-1a2b"
    assert undo["via"] == "slurm" and undo["gpu_count"] == 2
    json.dumps(undo)  # it goes into the ledger

    fake = FakeSlurm(jobs=[("4242", "RUNNING", "gpufleet-chaos-burn-f-1a2b"), ("7", "RUNNING", "train_sim")])
    result = burn.revert(dict(spec(seconds=600, via="slurm"), **undo), slurm_ctx(fake))
    assert fake.commands("scancel") == [["scancel", "4242"]]
    assert result["already"] is False and "4242" in result["reverted"][0]


def test_inject_via_slurm_all_gpus_reads_the_gres_and_parses_the_cluster_suffix() -> None:
    fake = FakeSlurm(sbatch_out="4243;cluster-a\n", gres="gpu:h100:4(S:0-1)")
    undo = burn.inject(spec(seconds=60, via="slurm"), slurm_ctx(fake))
    assert "--gres=gpu:4" in fake.commands("sbatch")[0]
    assert undo["job_id"] == "4243"


def test_inject_via_slurm_without_a_job_id_is_an_error_naming_the_job() -> None:
    with pytest.raises(GpufleetError, match="gpufleet-chaos-burn-f-1a2b"):
        burn.inject(spec(seconds=60, gpus=[0], via="slurm"), slurm_ctx(FakeSlurm(sbatch_out="")))


def test_inject_via_slurm_check_mode_runs_nothing() -> None:
    fake = FakeSlurm()
    undo = burn.inject(spec(seconds=60, gpus=[0], via="slurm"), slurm_ctx(fake, check_mode=True))
    assert fake.commands("sbatch") == [] and undo["job_id"] is None and undo["ran"] is False


def test_revert_via_slurm_of_an_ended_job_is_already_done() -> None:
    fake = FakeSlurm(scancel_err="scancel: error: Kill job error on job id 4242: Invalid job id specified\n")
    result = burn.revert({"via": "slurm", "job_id": "4242", "job_name": "gpufleet-chaos-burn-f-1a2b"}, slurm_ctx(fake))
    assert result == {"reverted": [], "already": True}
    fake = FakeSlurm(scancel_err="scancel: error: Kill job error on job id 4242: Job/step already completing or "
                                 "completed\n")
    assert burn.revert({"via": "slurm", "job_id": "4242", "job_name": "x"}, slurm_ctx(fake))["already"] is True


FAULTY_RUN = ("100.0%  proc'd: 2400 (41002 Gflop/s) - 2310 (40512 Gflop/s)   errors: 0 - 3   temps: 66 C - 68 C \n",
              "Tested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: FAULTY\n")


def test_revert_via_slurm_reads_the_burns_verdict_from_its_output(tmp_path) -> None:
    """gpu-burn exits 0 whatever it found: the rollback reads its output, and the report gets the verdict."""
    output = tmp_path / "burn.out"
    output.write_text(burn_output(*FAULTY_RUN))
    undo = {"via": "slurm", "job_id": "4242", "job_name": "x", "tool": "gpu_burn", "output": str(output)}
    result = burn.revert(undo, slurm_ctx(FakeSlurm()))
    assert result["observed"] == {"burn": {"tool": "gpu_burn", "verdict": "faulty",
                                           "why": "GPU(s) 1 FAULTY: wrong results under load"}}
    output.unlink()
    missing = burn.revert(undo, slurm_ctx(FakeSlurm()))["observed"]["burn"]
    assert missing["verdict"] == "unknown" and "%s cannot be read on this host" % output in missing["why"]
    # A neighbour job (the lab's sleep) has no tool: nothing to read; check mode reads nothing either.
    assert "observed" not in burn.revert(dict(undo, tool=None), slurm_ctx(FakeSlurm()))
    assert "observed" not in burn.revert(undo, slurm_ctx(FakeSlurm(), check_mode=True))


def test_revert_via_slurm_other_scancel_errors_raise() -> None:
    fake = FakeSlurm(scancel_err="scancel: error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmCommandError):
        burn.revert({"via": "slurm", "job_id": "4242", "job_name": "x"}, slurm_ctx(fake))


def test_revert_after_a_crash_mid_inject_finds_the_job_by_name() -> None:
    # The ledger holds only the spec: sbatch ran, its job id never came back.
    fake = FakeSlurm(jobs=[("4242", "PENDING", "gpufleet-chaos-burn-f-1a2b"), ("7", "RUNNING", "train_sim")])
    result = burn.revert(spec(seconds=60, via="slurm"), slurm_ctx(fake))
    assert fake.commands("scancel") == [["scancel", "4242"]]
    assert result["already"] is False
    # Nothing by that name: nothing to do.
    fake = FakeSlurm(jobs=[("7", "RUNNING", "train_sim")])
    assert burn.revert(spec(seconds=60, via="slurm"), slurm_ctx(fake)) == {"reverted": [], "already": True}
    assert fake.commands("scancel") == []


# ---------------------------------------------------------------- via kubernetes (fake CoreV1Api)


class StatusError(ApiException):
    def __init__(self, status: int) -> None:
        # Positional: the kubernetes ApiException takes status first; the stand-in that
        # module_utils/kube/client.py defines without the kubernetes package is a plain Exception.
        super().__init__(status)
        self.status = status
        self.reason = "status %d" % status
        self.body = None


class FakeCoreV1:
    def __init__(self, allocatable: Optional[Dict[str, str]] = None) -> None:
        self.pods: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.calls: List[Tuple[str, Any, Dict[str, Any]]] = []
        self.allocatable = allocatable if allocatable is not None else {"nvidia.com/gpu": "8", "cpu": "64"}
        self.log = ""

    def read_node(self, name: str) -> Dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"allocatable": self.allocatable}}

    def create_namespaced_pod(self, namespace: str, body: Dict[str, Any], **kwargs: Any) -> Dict[str, Any]:
        self.calls.append(("create", (namespace, body), kwargs))
        key = (namespace, body["metadata"]["name"])
        if key in self.pods:
            raise StatusError(409)
        if not kwargs.get("dry_run"):
            self.pods[key] = body
        return body

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.calls.append(("log", (namespace, name), kwargs))
        if (namespace, name) not in self.pods:
            raise StatusError(404)
        return self.log

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Dict[str, Any]:
        self.calls.append(("delete", (namespace, name), kwargs))
        if (namespace, name) not in self.pods:
            raise StatusError(404)
        if not kwargs.get("dry_run"):
            del self.pods[(namespace, name)]
        return {}


def kube_spec(**params: Any) -> Dict[str, Any]:
    return spec(**dict({"seconds": 300, "via": "kubernetes", "image": "registry.local/gpu-burn:1"}, **params))


def test_inject_via_kubernetes_creates_the_pod_and_revert_deletes_it() -> None:
    api = FakeCoreV1()
    ctx = FaultContext.of(lab_dir=None, check_mode=False, core_v1=api)
    undo = burn.inject(kube_spec(), ctx)
    body = api.pods[("gpufleet-chaos", "gpufleet-chaos-burn-f-1a2b")]
    assert body["spec"]["nodeName"] == NODE
    assert body["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}  # all: the allocatable
    assert undo == {"via": "kubernetes", "node": NODE, "fault_id": "f-1a2b", "namespace": "gpufleet-chaos",
                    "pod": "gpufleet-chaos-burn-f-1a2b", "gpu_count": 8, "tool": "gpu_burn", "existed": False,
                    "check_mode": False}
    # A rerun after a crash finds it there.
    assert burn.inject(kube_spec(), ctx)["existed"] is True
    api.log = burn_output(*FAULTY_RUN)
    reverted = burn.revert(dict(kube_spec(), **undo), ctx)
    assert reverted["already"] is False and reverted["observed"]["burn"]["verdict"] == "faulty"
    assert [call[0] for call in api.calls[-2:]] == ["log", "delete"], "the log is read before the Pod goes"
    assert api.pods == {}
    assert burn.revert(dict(kube_spec(), **undo), ctx) == {"reverted": [], "already": True}
    # The spec alone (crash mid-inject) names the same Pod.
    api.pods[("gpufleet-chaos", "gpufleet-chaos-burn-f-1a2b")] = body
    assert burn.revert(kube_spec(), ctx)["already"] is False and api.pods == {}


def test_inject_via_kubernetes_check_mode_is_a_server_side_dry_run() -> None:
    api = FakeCoreV1()
    burn.inject(kube_spec(gpus=[0]), FaultContext.of(lab_dir=None, check_mode=True, core_v1=api))
    assert api.pods == {} and api.calls[0][2] == {"dry_run": "All"}


def test_inject_via_kubernetes_without_gpus_on_the_node_changes_nothing() -> None:
    api = FakeCoreV1(allocatable={"cpu": "8"})
    with pytest.raises(GpufleetError, match=r"no allocatable nvidia\.com/gpu"):
        burn.inject(kube_spec(), FaultContext.of(lab_dir=None, check_mode=False, core_v1=api))
    assert api.calls == []


# ---------------------------------------------------------------- via lab (real fake GPU state)


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    state_dir = tmp_path / "gpus" / NODE
    assert fgs.init(str(state_dir), 4, NODE, PRODUCT) is True
    # Not the defaults: the rollback must bring back these exact values, not "healthy".
    fgs.set_fields(str(state_dir), 1, utilization_gpu=37, utilization_memory=12, temperature=51, power_mw=312000,
                   memory_used=5 * 1024**3, throttle_reasons=0x1)
    return tmp_path


def snapshot(state_dir: Path) -> Dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(state_dir.iterdir()) if path.is_file()
            and path.name != ".lock"}


def lab_ctx(lab_dir: Path, **extra: Any) -> Dict[str, Any]:
    return FaultContext.of(**dict({"lab_dir": str(lab_dir), "slurm_conf": None, "check_mode": False}, **extra))


def test_lab_inject_sets_the_burn_and_revert_restores_every_byte(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    assert sorted(before) == ["gpu0.state", "gpu1.state", "gpu2.state", "gpu3.state", "node.state"]
    undo = burn.inject(spec(seconds=60, gpus=[1, 2], memory_percent=75), lab_ctx(lab))
    json.dumps(undo)

    gpus = fgs.read(str(state_dir))["gpus"]
    for gpu in (1, 2):
        assert gpus[gpu]["utilization_gpu"] == 100
        assert gpus[gpu]["utilization_memory"] == 60
        assert gpus[gpu]["temperature"] == 83
        assert gpus[gpu]["power_mw"] == 690000
        assert gpus[gpu]["memory_used"] == gpus[gpu]["memory_total"] * 75 // 100
        assert gpus[gpu]["throttle_reasons"] & 0x4
    assert gpus[1]["throttle_reasons"] == 0x5  # the reason it had is kept beside the power cap
    assert gpus[0]["utilization_gpu"] == 0 and gpus[3]["utilization_gpu"] == 0  # not burned
    assert undo["gpus"][0] == {"gpu": 1, "saved": {"utilization_gpu": 37, "utilization_memory": 12, "temperature": 51,
                                                   "power_mw": 312000, "memory_used": 5 * 1024**3,
                                                   "throttle_reasons": 1}}
    assert os.path.isfile(undo["journal"])

    result = burn.revert(dict(spec(seconds=60, gpus=[1, 2]), **undo), lab_ctx(lab))
    assert result["already"] is False and len(result["reverted"]) == 2
    assert snapshot(state_dir) == before  # gpu<N>.state byte-identical, the journal gone
    # Twice is fine.
    assert burn.revert(dict(spec(seconds=60, gpus=[1, 2]), **undo), lab_ctx(lab)) == {"reverted": [], "already": True}
    assert snapshot(state_dir) == before


def test_lab_all_gpus_and_revert_from_the_spec_alone(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    burn.inject(spec(seconds=60), lab_ctx(lab))  # via lab is the lab's default; gpus all
    assert all(gpu["utilization_gpu"] == 100 for gpu in fgs.read(str(state_dir))["gpus"])
    # The controller died before the undo reached the ledger: the journal has the saved values.
    result = burn.revert(spec(seconds=60), lab_ctx(lab))
    assert len(result["reverted"]) == 4
    assert snapshot(state_dir) == before


def test_lab_reinject_after_a_crash_keeps_the_values_from_before(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    burn.inject(spec(seconds=60, gpus=[1]), lab_ctx(lab))
    undo = burn.inject(spec(seconds=60, gpus=[1]), lab_ctx(lab))  # the rerun sees the burned values
    assert undo["gpus"][0]["saved"]["utilization_gpu"] == 37
    burn.revert(undo, lab_ctx(lab))
    assert snapshot(state_dir) == before


def test_lab_check_mode_changes_nothing(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    undo = burn.inject(spec(seconds=60, gpus=[0]), lab_ctx(lab, check_mode=True))
    assert undo["check_mode"] is True and snapshot(state_dir) == before
    assert not os.path.exists(undo["journal"])


def test_lab_bad_gpu_or_node_changes_nothing(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    with pytest.raises(FieldError) as err:
        burn.inject(spec(seconds=60, gpus=[3, 4]), lab_ctx(lab))
    assert err.value.field == "params.gpus"
    with pytest.raises(FieldError) as err:
        burn.inject(dict(spec(seconds=60), node="gpu-z-001"), lab_ctx(lab))
    assert err.value.field == "target"
    assert snapshot(state_dir) == before


def test_lab_neighbour_job_is_submitted_and_cancelled(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    fake = FakeSlurm(sbatch_out="77\n")
    undo = burn.inject(spec(seconds=90, gpus=[0, 1], neighbour_job=True), lab_ctx(lab, run=fake))
    assert fake.commands("sbatch") == [[
        "sbatch", "--parsable", "-w", NODE, "--gres=gpu:2", "--time=3", "--job-name=gpufleet-chaos-burn-f-1a2b",
        "--output=/dev/null", "--wrap", "sleep 90"]]
    assert undo["neighbour"]["job_id"] == "77"
    assert json.loads(Path(undo["journal"]).read_text())["neighbour"]["job_id"] == "77"

    fake = FakeSlurm(jobs=[("77", "RUNNING", "gpufleet-chaos-burn-f-1a2b")])
    result = burn.revert(undo, lab_ctx(lab, run=fake))
    assert fake.commands("scancel") == [["scancel", "77"]]
    assert len(result["reverted"]) == 3
    assert snapshot(state_dir) == before


def test_lab_failed_neighbour_submit_leaves_the_gpus_as_they_were(lab: Path) -> None:
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)

    def refuse(argv: List[str], env: Dict[str, str], timeout: Optional[float]) -> Tuple[int, str, str]:
        if argv[0] == "sbatch":
            return 1, "", "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
        return FakeSlurm()(argv, env, timeout)

    with pytest.raises(SlurmCommandError):
        burn.inject(spec(seconds=60, gpus=[0], neighbour_job=True), lab_ctx(lab, run=refuse))
    assert snapshot(state_dir) == before


def test_plan_via_lab_says_what_is_simulated(tmp_path: Path) -> None:
    result = burn.plan(dict(spec(seconds=60, gpus=[0], neighbour_job=True), lab_dir=str(tmp_path)))
    assert result["via"] == "lab"
    assert any("no clock field" in note for note in result["simulated"])
    assert any("gpu_burn -d -m 90% 60" in note for note in result["simulated"])
    assert any(str(tmp_path / "gpus" / NODE) in action for action in result["actions"])
    assert result["commands"][0][-2:] == ["--wrap", "sleep 60"]
    assert result["missing"] == []


def test_the_engine_shaped_spec_round_trip(lab: Path) -> None:
    # As chaos/api.py builds it: registry defaults merged into params, lab_dir in the spec, the
    # ledger's undo = spec + what inject returned.
    state_dir = lab / "gpus" / NODE
    before = snapshot(state_dir)
    the_spec = {"experiment": "gpu_burn", "node": NODE, "backend": "default", "params": {"seconds": 60, "via": "lab"},
                "fault_id": "f-20261130-195000-ab12-%s" % NODE, "lab_dir": str(lab)}
    ctx = FaultContext.of(lab_dir=str(lab), slurm_conf=None, check_mode=False, kubeconfig=None, context=None,
                          namespace="gpufleet-chaos")
    assert burn.plan(the_spec)["via"] == "lab"
    undo = burn.inject(the_spec, ctx)
    assert burn.revert(dict(the_spec, **undo), ctx)["already"] is False
    assert snapshot(state_dir) == before


def test_the_pod_namespace_defaults_to_the_drills_chaos_namespace() -> None:
    api = FakeCoreV1()
    undo = burn.inject(kube_spec(gpus=[0]), FaultContext(core_v1=api, namespace="chaos-x"))
    assert undo["namespace"] == "chaos-x" and ("chaos-x", "gpufleet-chaos-burn-f-1a2b") in api.pods
    # params.namespace wins.
    undo = burn.inject(kube_spec(gpus=[0], namespace="other"), FaultContext(core_v1=api, namespace="chaos-x"))
    assert undo["namespace"] == "other"


def test_a_burn_that_found_the_node_unfit_is_a_finding_of_the_drill() -> None:
    import jsonschema

    from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import scoring
    from ansible_collections.gpufleet.resilience.plugins.module_utils.report import document

    drill = {"id": "d-20261204-000000-ab12", "experiment": "gpu_burn", "family": "burn", "targets": [NODE],
             "started_at": 1.0}
    verdicts = {"faulty": "GPU(s) 1 FAULTY: wrong results under load", "ok": "-", "unknown": "no result lines"}
    faults = [{"id": "f-%s" % verdict, "node": NODE, "rollback": "done", "actions": ["cancelled Slurm job 4242"],
               "observed": {"burn": {"tool": "gpu_burn", "verdict": verdict, "why": why}}}
              for verdict, why in verdicts.items()]
    doc = scoring.document(drill, [], {}, faults, 2.0)
    jsonschema.Draft202012Validator(document.DRILL_SCHEMA).validate(doc)
    found = [text for text in doc["findings"] if text.startswith("gpu_burn on")]
    assert found == ["gpu_burn on %s found the node unfit for work (faulty): GPU(s) 1 FAULTY: wrong results under "
                     "load" % NODE], "ok and unknown are not findings (unknown: cut short, not a fault)"
    assert "observed burn: tool=gpu_burn, verdict=faulty, why=GPU(s) 1 FAULTY" in document.fault_rows(doc)[0][-1]
