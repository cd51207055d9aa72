"""The validation before return to service: what runs, how its output is judged, and the order of
the Slurm steps, on a fake of our own Slurm client (the real slurmctld runs it in
tests/integration/remediation/test_remediation_loop.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.validation import (
    NCCL_TESTS_ARGS,
    Validation,
    for_pool,
    judge,
    judge_auto,
    names,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.validation_run import (
    admit_unvalidated,
    keep_output,
    validate_node,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import SBATCH_OPTIONS
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmNode
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

BURN_SIM = Path(__file__).resolve().parents[5] / "roles" / "slurm" / "files" / "gpu_burn_sim.py"
NCCL_SIM = BURN_SIM.with_name("all_reduce_perf_sim.py")
REMEDIATION = "r-20261205T031502-gpu-a-003-1a2b3c"


def params(tmp_path, **more):
    base = dict(node="gpu-a-003", remediation_id=REMEDIATION, backend="lab", seconds=3, min_ratio=0.75,
                output_dir=str(tmp_path / "out"), user="root", lab_dir=str(tmp_path / "lab"))
    base.update(more)
    return base


def fake_node(tmp_path, node="gpu-a-003", **fields):
    """A simulated node's state directory, its GPUs with ``fields`` ({gpu: {field: value}})."""
    state = tmp_path / "lab" / "gpus" / node
    fake_gpu_state.init(str(state), 8, node, "NVIDIA-H100-80GB-HBM3")
    for gpu, values in fields.items():
        fake_gpu_state.set_fields(str(state), int(gpu), **values)
    return state


def burn_output(tmp_path, node="gpu-a-003", **fields):
    """What the lab's gpu_burn_sim prints for a node whose GPUs have ``fields``."""
    done = subprocess.run([sys.executable, str(BURN_SIM), "--state-dir", str(fake_node(tmp_path, node, **fields)),
                           "--seconds", "0"], capture_output=True, text=True, check=True)
    return done.stdout


def nccl_output(tmp_path, node="gpu-a-003", **fields):
    """What the lab's all_reduce_perf_sim prints, run as the validation runs all_reduce_perf."""
    args = Validation.from_params(params(tmp_path, backend="nccl_tests", min_busbw_gbps=100)).command(8)[1:]
    done = subprocess.run([sys.executable, str(NCCL_SIM), *args, "--state-dir",
                           str(fake_node(tmp_path, node, **fields))], capture_output=True, text=True, check=False)
    return done.stdout


@pytest.mark.parametrize("field,value", [
    ("node", "gpu-a-[1-3]"), ("remediation_id", ""), ("backend", "nccl"), ("seconds", 0), ("min_ratio", 1.5),
    ("output_dir", "relative/dir"), ("user", "root;id"), ("lab_dir", None), ("dcgm_level", 4), ("gpus", 0),
    ("min_busbw_gbps", -1), ("nccl_tests", "all_reduce_perf; id"),
])
def test_each_bad_field_is_named(tmp_path, field, value):
    with pytest.raises(FieldError) as caught:
        Validation.from_params(params(tmp_path, **{field: value}))
    assert caught.value.field == field


def test_names_derive_from_the_remediation_and_are_plain():
    assert names(REMEDIATION) == names(REMEDIATION)
    assert names(REMEDIATION) != names(REMEDIATION + "x")
    assert names("r-'; rm -rf /").startswith("gpufleet-validate-") and names("x").replace("-", "").isalnum()


def test_the_job_runs_in_the_reservation_on_the_node(tmp_path):
    validation = Validation.from_params(params(tmp_path))
    argv = SlurmRunner(bin_dir="/lab/bin").argv("sbatch", SBATCH_OPTIONS, **validation.batch_job(8).sbatch_values())
    assert argv[:4] == ["/lab/bin/sbatch", "--parsable", "-w", "gpu-a-003"]
    assert "--reservation=%s" % validation.name in argv and "--gres=gpu:8" in argv and "--time=2" in argv
    assert argv[-1].startswith(str(tmp_path / "lab" / "bin" / "gpu_burn_sim") + " --state-dir ")
    assert Validation.from_params(params(tmp_path, backend="dcgm_diag", dcgm_level=3)).command() == (
        "dcgmi", "diag", "-r", "3")
    assert Validation.from_params(params(tmp_path, backend="gpu_burn", seconds=300)).command() == (
        "gpu_burn", "-d", "-m", "90%", "300")
    nccl = Validation.from_params(params(tmp_path, backend="nccl_tests", min_busbw_gbps=300,
                                         nccl_tests="/opt/nccl-tests/build/all_reduce_perf"))
    assert nccl.command(8) == ("/opt/nccl-tests/build/all_reduce_perf", *NCCL_TESTS_ARGS, "-g", "8")
    assert nccl.tool == "nccl_tests" and nccl.batch_job(8).minutes == 3


def test_nccl_tests_needs_its_bandwidth_floor(tmp_path):
    with pytest.raises(FieldError) as caught:
        Validation.from_params(params(tmp_path, backend="nccl_tests"))
    assert caught.value.field == "min_busbw_gbps" and "-b 8M -e 1G -f 2 -g <gpus>" in str(caught.value)


def test_a_healthy_fabric_passes_and_a_slow_gpu_fails_the_floor(tmp_path):
    healthy = judge(nccl_output(tmp_path), "nccl_tests", 0.75, min_busbw_gbps=200)
    assert healthy["passed"] and healthy["verdict"] == "ok" and healthy["busbw_gbps"] > 200, healthy
    # GPU 2 with 9 of its 18 links down, or computing at 40 %: the ring runs at its slowest GPU.
    for fields in ({"nvlink_down": 0x1FF}, {"perf_permille": 400}):
        slow = judge(nccl_output(tmp_path, **{"2": fields}), "nccl_tests", 0.75, min_busbw_gbps=200)
        assert not slow["passed"] and slow["busbw_gbps"] < 0.6 * healthy["busbw_gbps"], slow
        assert slow["why"] == "bus bandwidth %.1f GB/s below the floor of 200.0 GB/s (all_reduce_perf)" % (
            slow["busbw_gbps"])


def test_wrong_sums_or_a_lost_gpu_fail_whatever_the_bandwidth(tmp_path):
    wrong = judge(nccl_output(tmp_path, **{"5": {"ecc_dbe_volatile": 1}}), "nccl_tests", 0.75, min_busbw_gbps=1)
    assert not wrong["passed"] and wrong["verdict"] == "fail" and "values out of bounds" in wrong["why"], wrong
    lost = judge(nccl_output(tmp_path, **{"1": {"lost": 1}}), "nccl_tests", 0.75, min_busbw_gbps=1)
    assert not lost["passed"] and lost["verdict"] == "unknown" and lost["busbw_gbps"] is None, lost
    assert lost["why"].startswith("all_reduce_perf printed no summary") and "unhandled cuda error" in lost["why"]


def test_a_pool_sets_its_own_validation_over_the_defaults(tmp_path):
    pools = {"gpu-h100": {"backend": "nccl_tests", "min_busbw_gbps": 300}, "cpu": {"backend": "none"}}
    assert for_pool(params(tmp_path, pool="gpu-h100", pools=pools))["backend"] == "nccl_tests"
    assert for_pool(params(tmp_path, pool="cpu", pools=pools))["backend"] == "none"
    assert for_pool(params(tmp_path, pool="gpu-b", pools=pools))["backend"] == "lab"  # no entry: the defaults
    assert for_pool(params(tmp_path, pools=pools))["backend"] == "lab"  # no pool label


@pytest.mark.parametrize("pools,field", [
    ({"gpu-h100": {"backend": "nccl_tests"}}, "pools.gpu-h100.min_busbw_gbps"),
    ({"gpu-h100": {"min_bw": 300}}, "pools.gpu-h100.min_bw"),
    ({"gpu-h100": {"backend": "burn"}}, "pools.gpu-h100.backend"),
    ({"gpu-h100": {"seconds": 0}}, "pools.gpu-h100.seconds"),
    ({"gpu-h100": "nccl_tests"}, "pools.gpu-h100"),
    ({"gpu h100": {}}, "pools"),
])
def test_a_bad_pool_setting_is_named_even_for_another_pool(tmp_path, pools, field):
    with pytest.raises(FieldError) as caught:
        for_pool(params(tmp_path, pool="gpu-a", pools=pools))
    assert caught.value.field == field


def test_a_healthy_node_passes_its_simulated_burn(tmp_path):
    verdict = judge(burn_output(tmp_path), "gpu_burn", 0.75)
    assert verdict["passed"] and verdict["verdict"] == "ok" and verdict["why"] == "", verdict


def test_a_slow_gpu_fails_below_the_floor_and_passes_above_it(tmp_path):
    text = burn_output(tmp_path, **{"3": {"perf_permille": 500}})
    verdict = judge(text, "gpu_burn", 0.75)
    assert not verdict["passed"] and verdict["slow"] == [3], verdict
    assert "GPU(s) 3 below 75% of the node's fastest GPU" in verdict["why"]
    assert judge(text, "gpu_burn", 0.0)["passed"]  # the floor off


def test_a_gpu_with_double_bit_errors_is_faulty(tmp_path):
    verdict = judge(burn_output(tmp_path, **{"5": {"ecc_dbe_volatile": 2}}), "gpu_burn", 0.75)
    assert not verdict["passed"] and verdict["verdict"] == "faulty" and "GPU(s) 5 FAULTY" in verdict["why"]


def test_a_burn_cut_short_never_passes():
    verdict = judge("Burning for 120 seconds.\n", "gpu_burn", 0.75)
    assert not verdict["passed"] and verdict["verdict"] == "unknown"
    assert verdict["why"].startswith("the burn gave no verdict")


class FakeSlurm:
    """Our client's interface, recording each call; jobs end after ``runs`` polls."""

    def __init__(self, drained=True, runs=2, reserved=False, state="IDLE"):
        self.calls = []
        self.state = state
        self.reserved = reserved
        self.drained = drained
        self.runs = runs
        self.submitted = []

    def reservation_exists(self, name):
        return self.reserved

    def create_reservation(self, name, node, users):
        self.calls.append(("reserve", name, node, users))
        self.reserved = True

    def delete_reservation(self, name):
        self.calls.append(("unreserve", name))
        was, self.reserved = self.reserved, False
        return True if was else None

    def nodes(self, names, with_jobs=True):
        flags = ("DRAIN",) if self.drained else ()
        return {names[0]: SimpleNamespace(flags=flags, state=self.state, gpus=8)}

    def set_node_state(self, node, state, reason=None):
        self.calls.append(("state", node, state, reason))
        self.drained = state == "DRAIN"
        self.state = "IDLE" if state == "RESUME" else self.state

    def submit(self, job):
        assert self.reserved and not self.drained and self.state != "DOWN", "submitted before the node was resumed"
        self.calls.append(("submit", job.reservation, job.gpus))
        self.submitted.append(job)
        return "77", None

    def jobs(self):
        self.runs -= 1
        return [SimpleNamespace(job_id="77")] if self.runs > 0 else []

    def cancel_unless_gone(self, job_id):
        self.calls.append(("cancel", job_id))


def run(tmp_path, client, output_text, intent=None, limit=None, **more):
    validation = Validation.from_params(params(tmp_path, **more))
    Path(validation.output_dir).mkdir(parents=True, exist_ok=True)
    Path(validation.output).write_text(output_text)
    recorded = []
    clock = iter(range(0, 100000, 10)) if limit else iter(range(100000))
    outcome = validate_node(client, validation, "gpufleet: Xid48 (remediation %s)" % REMEDIATION, intent or [],
                            recorded.extend, clock=lambda: next(clock), sleep=lambda s: None)
    return outcome, recorded


def test_reserve_resume_submit_then_drain_before_the_reservation_goes(tmp_path):
    client = FakeSlurm()
    outcome, recorded = run(tmp_path, client, burn_output(tmp_path))
    assert outcome["passed"] and recorded == ["77"]
    kinds = [call[0] for call in client.calls]
    assert kinds == ["reserve", "state", "submit", "state", "unreserve"], client.calls
    assert client.calls[1][2] == "RESUME" and client.calls[2][1] == names(REMEDIATION)
    # Passed: drained again with the fence's own reason, so the resume phase lifts it.
    assert client.calls[3][2:] == ("DRAIN", "gpufleet: Xid48 (remediation %s)" % REMEDIATION)


def test_an_admitted_replacement_that_passes_takes_work_and_one_that_fails_stays_drained(tmp_path):
    client = FakeSlurm()
    outcome = run(tmp_path, client, burn_output(tmp_path), admit=True)[0]
    assert outcome["passed"] and [call[0] for call in client.calls] == ["reserve", "state", "submit", "unreserve"]
    assert client.calls[1][2] == "RESUME" and not client.drained
    assert outcome["actions"][-1] == "admitted gpu-a-003: it takes work"
    # Its own reservation: never the one of a validate phase of the same remediation.
    assert client.calls[0][1] != names(REMEDIATION) and client.calls[0][1].startswith("gpufleet-validate-")
    failing = FakeSlurm()
    outcome = run(tmp_path, failing, burn_output(tmp_path, **{"2": {"perf_permille": 300}}), admit=True)[0]
    assert not outcome["passed"] and failing.drained
    assert failing.calls[3][2] == "DRAIN" and failing.calls[3][3].startswith("gpufleet: validation failed: GPU(s) 2")


def test_an_admit_with_no_backend_lifts_our_fence_alone():
    ours = FakeSlurm()
    ours.nodes = lambda names, with_jobs=True: {names[0]: SlurmNode(
        name=names[0], flags=("DRAIN",), state="IDLE", reason="gpufleet: Xid79 (remediation r-1)")}
    assert admit_unvalidated(ours, "gpu-a-005")["actions"] == ["resumed gpu-a-005 (no validation backend)"]
    assert ours.calls == [("state", "gpu-a-005", "RESUME", None)]
    theirs = FakeSlurm()
    theirs.nodes = lambda names, with_jobs=True: {names[0]: SlurmNode(
        name=names[0], flags=("DRAIN",), state="IDLE", reason="disk swap by ops")}
    assert admit_unvalidated(theirs, "gpu-a-005")["actions"] == [] and theirs.calls == []
    idle = FakeSlurm()
    idle.nodes = lambda names, with_jobs=True: {names[0]: SlurmNode(name=names[0], state="IDLE")}
    assert admit_unvalidated(idle, "gpu-a-005")["actions"] == [] and idle.calls == []
    down = FakeSlurm()
    down.nodes = lambda names, with_jobs=True: {names[0]: SlurmNode(
        name=names[0], state="DOWN", reason="gpufleet: replaced (remediation r-1)")}
    assert admit_unvalidated(down, "gpu-a-005", check_mode=True)["actions"] == [
        "resumed gpu-a-005 (no validation backend)"]
    assert down.calls == []


def test_a_down_node_is_resumed_into_the_reservation_too(tmp_path):
    client = FakeSlurm(drained=False, state="DOWN")
    outcome = run(tmp_path, client, burn_output(tmp_path))[0]
    steps = [call[0] for call in client.calls]
    assert outcome["passed"] and steps == ["reserve", "state", "submit", "state", "unreserve"], client.calls


def test_a_failed_node_is_drained_with_why_and_not_resumed(tmp_path):
    client = FakeSlurm()
    outcome = run(tmp_path, client, burn_output(tmp_path, **{"3": {"perf_permille": 400}}))[0]
    assert outcome["passed"] is False and outcome["slow"] == [3]
    drained = [call for call in client.calls if call[0] == "state"][-1]
    assert drained[2] == "DRAIN" and drained[3].startswith("gpufleet: validation failed: GPU(s) 3 below 75%")
    assert client.calls[-1][0] == "unreserve"


def test_a_rerun_waits_for_the_recorded_job_and_submits_nothing(tmp_path):
    client = FakeSlurm(drained=False, reserved=True)
    outcome, recorded = run(tmp_path, client, burn_output(tmp_path), intent=["77"])
    assert outcome["passed"] and outcome["job_id"] == "77" and recorded == []
    assert not client.submitted and [call[0] for call in client.calls] == ["state", "unreserve"]


def test_a_job_that_never_ends_is_cancelled_and_fails(tmp_path):
    client = FakeSlurm(runs=10 ** 6)
    outcome = run(tmp_path, client, "", limit=True)[0]
    assert outcome["passed"] is False and "did not end within 63 s" in outcome["why"]
    assert ("cancel", "77") in client.calls and client.calls[-1][0] == "unreserve"


def test_check_mode_does_nothing_and_says_what_it_would(tmp_path):
    client = FakeSlurm()
    validation = Validation.from_params(params(tmp_path))
    outcome = validate_node(client, validation, "gpufleet: x", [], lambda ids: None, check_mode=True)
    assert outcome["passed"] is None and client.calls == [] and len(outcome["actions"]) == 4


def test_the_output_joins_the_evidence_bundle(tmp_path):
    validation = Validation.from_params(params(tmp_path))
    Path(validation.output_dir).mkdir(parents=True)
    Path(validation.output).write_text("GPU 0: OK\n")
    assert keep_output(validation, str(tmp_path / "evidence")) is None  # no bundle: nothing made up
    (tmp_path / "evidence" / REMEDIATION).mkdir(parents=True)
    copy = keep_output(validation, str(tmp_path / "evidence"))
    assert Path(copy).read_text() == "GPU 0: OK\n"


def test_auto_runs_dcgm_where_it_is_else_a_burn_else_nothing(tmp_path):
    auto = Validation.from_params(params(tmp_path, backend="auto", seconds=120, dcgm_level=3))
    shell, flag, script = auto.command(8)
    assert (shell, flag) == ("sh", "-c") and auto.limit_s == 1200 + 60
    assert script.index("command -v dcgmi") < script.index("command -v gpu_burn")
    assert "exec dcgmi diag -r 3;" in script and "exec gpu_burn -d -m 90% 120;" in script
    # The job's first line names what ran; the rest is read as that tool's output.
    burnt = judge_auto("gpufleet-validate: gpu_burn\n" + burn_output(tmp_path, **{"4": {"perf_permille": 400}}), 0.75)
    assert burnt["tool"] == "gpu_burn" and not burnt["passed"] and burnt["slow"] == [4], burnt
    nothing = judge_auto("gpufleet-validate: none\n", 0.75)
    assert nothing["passed"] is None and nothing["skipped"].startswith("no validation tool on the node"), nothing
    silent = judge_auto("sh: 1: exec: dcgmi: Permission denied\n", 0.75)
    assert silent["passed"] is False and "did not say which tool it ran" in silent["why"]


def test_a_node_with_no_tool_is_fenced_again_and_a_replacement_takes_work(tmp_path):
    client = FakeSlurm()
    outcome = run(tmp_path, client, "gpufleet-validate: none\n", backend="auto")[0]
    assert outcome["passed"] is None and client.drained
    assert client.calls[3][2:] == ("DRAIN", "gpufleet: Xid48 (remediation %s)" % REMEDIATION)  # the fence's own
    spare = FakeSlurm()
    outcome = run(tmp_path, spare, "gpufleet-validate: none\n", backend="auto", admit=True)[0]
    assert not spare.drained and outcome["actions"][-1].startswith("admitted gpu-a-003: it takes work (not validated")
