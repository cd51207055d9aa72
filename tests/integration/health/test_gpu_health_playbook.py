"""gpu_health and gpu_info in real ansible-playbook runs against the fake libnvidia-ml.so.1.

Each test sets the simulated GPUs' state, runs the module through ansible-playbook
(which loads unmodified pynvml, which loads the fake library through
LD_LIBRARY_PATH) and asserts the returned verdict and faults.
"""

from __future__ import annotations

import threading
import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

pytestmark = pytest.mark.integration

HEALTH = {"name": "health", "gpufleet.resilience.gpu_health": {}}


def health_task(**options):
    return {"name": "health", "gpufleet.resilience.gpu_health": options}


def faults_of(result, **match):
    return [f for f in result["faults"] if all(f.get(k) == v for k, v in match.items())]


def test_clean_machine_reports_healthy(run_tasks, gpu_node):
    run = run_tasks([HEALTH, {"name": "info", "gpufleet.resilience.gpu_info": {}}], gpu_node)
    assert run.rc == 0, run.stdout
    health = run.results["health"]
    assert health["verdict"] == "healthy"
    assert health["faults"] == []
    assert health["changed"] is False
    assert len(health["gpus"]) == 8
    facts = run.results["info"]["ansible_facts"]
    assert facts["gpufleet_gpu_count"] == 8
    uuids = {gpu["uuid"] for gpu in facts["gpufleet_gpus"]}
    state = fake_gpu_state.read(str(gpu_node))
    assert uuids == {gpu["uuid"] for gpu in state["gpus"]}
    assert all(gpu["name"] == "NVIDIA H100 80GB HBM3" for gpu in facts["gpufleet_gpus"])
    assert all(gpu["lost"] is False and gpu["ecc_dbe_volatile"] == 0 for gpu in facts["gpufleet_gpus"])


def test_xid79_through_nvml_event_api_while_waiting(run_tasks, gpu_node):
    injected = {}

    def inject_later():
        # Inject while ansible-playbook is already running the module's wait.
        time.sleep(4)
        injected["at"] = time.monotonic()
        fake_gpu_state.inject_xid(str(gpu_node), gpu=3, xid=79)

    injector = threading.Thread(target=inject_later)
    began = time.monotonic()
    injector.start()
    run = run_tasks([health_task(wait_for_xid=60)], gpu_node)
    injector.join()
    elapsed = time.monotonic() - began
    assert run.rc == 0, run.stdout
    health = run.results["health"]
    assert health["verdict"] == "fatal"
    assert health["action"] == "RESTART_BM"
    (fault,) = faults_of(health, xid=79)
    uuid3 = fake_gpu_state.read(str(gpu_node))["gpus"][3]["uuid"]
    assert fault["source"] == "nvml"
    assert fault["gpu_index"] == 3
    assert fault["gpu_uuid"] == uuid3
    assert fault["severity"] == "fatal"
    # It returned because the event came, not because the 60 s wait ran out.
    assert elapsed < 45, elapsed
    # Delivered once: a second wait sees nothing.
    again = run_tasks([health_task(wait_for_xid=1)], gpu_node)
    assert again.results["health"]["verdict"] == "healthy"


def test_xid48_with_63_on_one_gpu_is_drain_and_reset(run_tasks, gpu_node):
    fake_gpu_state.inject_xid(str(gpu_node), gpu=5, xid=48)
    fake_gpu_state.inject_xid(str(gpu_node), gpu=5, xid=63)
    run = run_tasks([health_task(wait_for_xid=10)], gpu_node)
    assert run.rc == 0, run.stdout
    health = run.results["health"]
    assert health["action"] == "DRAIN_AND_RESET"
    assert health["verdict"] == "fatal"
    assert {f["xid"] for f in faults_of(health, gpu_index=5)} >= {48, 63}


@pytest.mark.parametrize(("xids", "verdict", "action"), [
    ((45,), "degraded", None),
    ((45, 79), "fatal", "RESTART_BM"),
])
def test_xid45_counts_only_when_solo(run_tasks, gpu_node, xids, verdict, action):
    lines = [f"[ 100.{n}] NVRM: Xid (PCI:0000:1b:00): {xid}, pid=4242, name=python, test" for n, xid in enumerate(xids)]
    run = run_tasks([health_task(kernel_log=lines)], gpu_node)
    assert run.rc == 0, run.stdout
    health = run.results["health"]
    (fault45,) = faults_of(health, xid=45)
    if len(xids) == 1:
        # Solo: the catalog's own action counts (the fabric/application must restart).
        assert fault45["action"] != "IGNORE"
        assert health["verdict"] != "fatal"
    else:
        # With XID 79 on the same GPU, 45 is only its consequence.
        assert fault45["action"] == "IGNORE"
        assert health["verdict"] == verdict
        assert health["action"] == action
    assert fault45["source"] == "kernel_log"
    assert fault45["pci_bus_id"] == "0000:1b:00.0"


def test_ecc_double_bit_count_rising(run_tasks, gpu_node):
    before = run_tasks([HEALTH], gpu_node).results["health"]
    assert before["verdict"] == "healthy"
    fake_gpu_state.set_fields(str(gpu_node), 2, ecc_dbe_volatile=2, ecc_dbe_aggregate=2)
    after = run_tasks([HEALTH], gpu_node).results["health"]
    assert after["verdict"] == "fatal"
    (fault,) = faults_of(after, gpu_index=2)
    assert fault["source"] == "nvml"
    assert fault["xid"] is None
    assert fault["action"] in ("RESET_GPU", "DRAIN_AND_RESET")
    assert after["gpus"][2]["ecc_dbe_volatile"] == 2


def test_over_temperature_with_thermal_throttling(run_tasks, gpu_node):
    hw_thermal_slowdown = 0x40
    fake_gpu_state.set_fields(str(gpu_node), 6, temperature=97, throttle_reasons=hw_thermal_slowdown)
    health = run_tasks([HEALTH], gpu_node).results["health"]
    assert health["verdict"] == "degraded"
    faults = faults_of(health, gpu_index=6)
    assert faults, health
    assert all(f["source"] == "nvml" for f in faults)
    assert health["gpus"][6]["temperature_c"] == 97
    assert "hw_thermal_slowdown" in health["gpus"][6]["throttle_reason_names"]


def test_gpu_lost_is_fatal(run_tasks, gpu_node):
    fake_gpu_state.set_lost(str(gpu_node), 4)
    run = run_tasks([HEALTH, {"name": "info", "gpufleet.resilience.gpu_info": {}}], gpu_node)
    assert run.rc == 0, run.stdout
    health = run.results["health"]
    assert health["verdict"] == "fatal"
    assert health["action"] == "RESTART_BM"
    (fault,) = faults_of(health, gpu_index=4)
    assert fault["source"] == "nvml"
    assert health["gpus"][4]["lost"] is True
    assert run.results["info"]["ansible_facts"]["gpufleet_gpus"][4]["lost"] is True
    # Every other GPU still reads normally.
    assert [g["lost"] for g in health["gpus"]].count(True) == 1


def test_bad_threshold_fails_naming_the_field(run_tasks, gpu_node):
    run = run_tasks([health_task(thresholds={"no_such_knob": 3})], gpu_node)
    assert run.rc != 0
    assert "thresholds.no_such_knob" in run.results["health"]["msg"]


def test_missing_nvml_library_is_a_clear_error(run_tasks, gpu_node, tmp_path):
    run = run_tasks([health_task(library_path=str(tmp_path / "nope" / "libnvidia-ml.so.1"))], gpu_node)
    assert run.rc != 0
    assert "cannot load NVML library" in run.results["health"]["msg"]
