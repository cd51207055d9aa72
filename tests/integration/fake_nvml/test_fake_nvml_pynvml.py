# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The fake libnvidia-ml.so.1, driven through unmodified pynvml, against state set by fake_gpu_state."""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state as fgs

pytestmark = pytest.mark.integration

XID_EVENT = 0x8
NVLINK_LINKS = 18


def mapped_nvml_libraries() -> List[str]:
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libnvidia-ml" in line})


# ---------------------------------------------------------------- loading


def test_pynvml_resolves_its_library_to_the_preloaded_fake(preloaded: ctypes.CDLL, nvml: Any) -> None:
    assert nvml.nvmlLib is not None
    assert nvml.nvmlLib._handle == preloaded._handle, "dlopen must reuse the already-loaded soname"
    assert mapped_nvml_libraries() == [str(Path(preloaded._name).resolve())]


def test_init_without_state_dir_is_driver_not_loaded(preloaded: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    monkeypatch.delenv("GPUFLEET_FAKE_NVML_DIR", raising=False)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_init_with_a_directory_that_was_never_initialised(
    preloaded: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml

    monkeypatch.setenv("GPUFLEET_FAKE_NVML_DIR", str(tmp_path))
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        pynvml.nvmlInit()


def test_calls_before_init_are_uninitialized(preloaded: ctypes.CDLL) -> None:
    count = ctypes.c_uint()
    assert preloaded.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 1  # NVML_ERROR_UNINITIALIZED


def test_subprocess_finds_the_fake_through_ld_library_path(fake_nvml_lib: Path, node_dir: str) -> None:
    """What an ansible-playbook run does: nothing preloaded, only LD_LIBRARY_PATH."""
    script = textwrap.dedent(
        """
        import json, pynvml
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml" in l})
        print(json.dumps({"uuids": [pynvml.nvmlDeviceGetUUID(h) for h in handles], "maps": maps}))
        pynvml.nvmlShutdown()
        """
    )
    env = {
        "PATH": os.environ["PATH"],
        "LD_LIBRARY_PATH": str(fake_nvml_lib.parent),
        "GPUFLEET_FAKE_NVML_DIR": node_dir,
    }
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    out = json.loads(result.stdout)
    assert out["uuids"] == [gpu["uuid"] for gpu in fgs.read(node_dir)["gpus"]]
    assert out["maps"] == [str(fake_nvml_lib.resolve())]


# ---------------------------------------------------------------- inventory and snapshot


def test_inventory_matches_the_state(nvml: Any, node_dir: str) -> None:
    state = fgs.read(node_dir)
    assert nvml.nvmlSystemGetDriverVersion() == "580.95.05"
    assert nvml.nvmlSystemGetNVMLVersion() == "13.580.95.05"
    assert nvml.nvmlSystemGetCudaDriverVersion() == nvml.nvmlSystemGetCudaDriverVersion_v2() == 13000
    assert nvml.nvmlDeviceGetCount() == 8
    for gpu in state["gpus"]:
        handle = nvml.nvmlDeviceGetHandleByIndex(gpu["index"])
        assert nvml.nvmlDeviceGetIndex(handle) == gpu["index"]
        assert nvml.nvmlDeviceGetUUID(handle) == gpu["uuid"]
        assert nvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
        assert nvml.nvmlDeviceGetSerial(handle) == gpu["serial"]
        pci = nvml.nvmlDeviceGetPciInfo(handle)
        assert pci.busId == gpu["pci_bus_id"]
        assert pci.busIdLegacy == gpu["pci_bus_id"][4:]
        assert (pci.domain, pci.bus, pci.device) == (0, int(gpu["pci_bus_id"][9:11], 16), 0)
        assert pci.pciDeviceId == 0x233010DE
        by_uuid = nvml.nvmlDeviceGetHandleByUUID(gpu["uuid"])
        by_bus = nvml.nvmlDeviceGetHandleByPciBusId(gpu["pci_bus_id"][4:].lower())
        assert nvml.nvmlDeviceGetIndex(by_uuid) == nvml.nvmlDeviceGetIndex(by_bus) == gpu["index"]
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(8)


def test_each_snapshot_field_follows_the_state_without_reinit(nvml: Any, node_dir: str) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(3)
    assert nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU) == 35
    fgs.set_fields(
        node_dir,
        3,
        temperature=95,
        power_mw=612345,
        memory_used=5 * 1024**3,
        utilization_gpu=97,
        utilization_memory=41,
        ecc_sbe_volatile=11,
        ecc_dbe_volatile=2,
        ecc_sbe_aggregate=1100,
        ecc_dbe_aggregate=7,
        retired_pages_pending=True,
        remapped_rows_corrected=3,
        remapped_rows_uncorrected=4,
        remapped_rows_pending=True,
        remapped_rows_failure=True,
        throttle_reasons=0x40 | 0x8,
        nvlink_down=0b101,
        nvlink_replay_errors=10,
        nvlink_recovery_errors=20,
        nvlink_crc_flit_errors=30,
        nvlink_crc_data_errors=40,
        nvlink_ecc_data_errors=50,
    )
    assert nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU) == 95
    assert nvml.nvmlDeviceGetTemperatureV(handle, nvml.NVML_TEMPERATURE_GPU) == 95
    assert nvml.nvmlDeviceGetPowerUsage(handle) == 612345
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert (memory.total, memory.used, memory.free) == (80 * 1024**3, 5 * 1024**3, 75 * 1024**3)
    memory_v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
    assert (memory_v2.total, memory_v2.used, memory_v2.free) == (80 * 1024**3, 5 * 1024**3, 75 * 1024**3)
    utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
    assert (utilization.gpu, utilization.memory) == (97, 41)
    ecc = {
        (kind, counter): nvml.nvmlDeviceGetTotalEccErrors(handle, kind, counter)
        for kind in (nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        for counter in (nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC)
    }
    assert ecc == {(0, 0): 11, (1, 0): 2, (0, 1): 1100, (1, 1): 7}
    assert nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle) == nvml.NVML_FEATURE_ENABLED
    assert nvml.nvmlDeviceGetRemappedRows(handle) == (3, 4, 1, 1)
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(handle) == 0x48
    assert nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle) == 0x48
    states = [nvml.nvmlDeviceGetNvLinkState(handle, link) for link in range(NVLINK_LINKS)]
    assert states == [0, 1, 0] + [1] * (NVLINK_LINKS - 3)
    assert [nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, counter) for counter in range(5)] == [10, 20, 30, 40, 50]
    assert [nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 7, counter) for counter in range(5)] == [0] * 5
    with pytest.raises(nvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkState(handle, NVLINK_LINKS)
    other = nvml.nvmlDeviceGetHandleByIndex(4)
    assert nvml.nvmlDeviceGetTemperature(other, nvml.NVML_TEMPERATURE_GPU) == 35
    assert nvml.nvmlDeviceGetRemappedRows(other) == (0, 0, 0, 0)


def test_unsupported_features_answer_not_supported(nvml: Any, node_dir: str) -> None:
    fgs.set_fields(node_dir, 0, nvlink_supported=False, retired_pages_supported=False)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkState(handle, 0)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, 0)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
    with pytest.raises(nvml.NVMLError_NotSupported):  # a generated stub (gen_stubs.py)
        nvml.nvmlDeviceGetPowerManagementLimit(handle)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeDoubleBitEccError, nvml.nvmlEventSetCreate())
    assert nvml.nvmlDeviceGetSupportedEventTypes(handle) == XID_EVENT


# ---------------------------------------------------------------- events


@pytest.fixture
def xid_events(nvml: Any) -> Any:
    """An event set with XID events registered on every GPU."""
    event_set = nvml.nvmlEventSetCreate()
    for index in range(nvml.nvmlDeviceGetCount()):
        nvml.nvmlDeviceRegisterEvents(
            nvml.nvmlDeviceGetHandleByIndex(index), nvml.nvmlEventTypeXidCriticalError, event_set
        )
    yield event_set
    nvml.nvmlEventSetFree(event_set)


def test_xid_is_delivered_exactly_once(nvml: Any, node_dir: str, xid_events: Any) -> None:
    fgs.inject_xid(node_dir, 3, 79)
    data = nvml.nvmlEventSetWait_v2(xid_events, 1000)
    assert (data.eventType, data.eventData) == (XID_EVENT, 79)
    assert nvml.nvmlDeviceGetIndex(data.device) == 3
    assert nvml.nvmlDeviceGetUUID(data.device) == fgs.read(node_dir)["gpus"][3]["uuid"]
    assert (data.gpuInstanceId, data.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF)
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(xid_events, 50)
    assert fgs.read(node_dir)["pending_events"] == []
    assert os.listdir(Path(node_dir, "events")) == [], "claimed event files are removed"


def test_xids_arrive_in_injection_order(nvml: Any, node_dir: str, xid_events: Any) -> None:
    injected = [(5, 48), (5, 63), (1, 94), (7, 79)]
    for gpu, xid in injected:
        fgs.inject_xid(node_dir, gpu, xid)
    delivered = []
    for _event in injected:
        data = nvml.nvmlEventSetWait_v2(xid_events, 1000)
        delivered.append((nvml.nvmlDeviceGetIndex(data.device), data.eventData))
    assert delivered == injected


def test_events_of_unregistered_gpus_stay_pending(nvml: Any, node_dir: str) -> None:
    event_set = nvml.nvmlEventSetCreate()
    nvml.nvmlDeviceRegisterEvents(nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlEventTypeXidCriticalError, event_set)
    fgs.inject_xid(node_dir, 1, 31)
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(event_set, 30)
    fgs.inject_xid(node_dir, 0, 13)
    assert nvml.nvmlEventSetWait_v2(event_set, 1000).eventData == 13
    nvml.nvmlEventSetFree(event_set)
    assert [(e["gpu"], e["xid"]) for e in fgs.read(node_dir)["pending_events"]] == [(1, 31)]


@pytest.mark.parametrize("timeout_ms", [0, 100, 300])
def test_wait_times_out_after_the_timeout(nvml: Any, xid_events: Any, timeout_ms: int) -> None:
    start = time.monotonic()
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(xid_events, timeout_ms)
    elapsed_ms = (time.monotonic() - start) * 1000
    assert timeout_ms <= elapsed_ms + 1 < timeout_ms + 150  # the lower bound allows poll()'s ms rounding


def test_wait_returns_as_soon_as_an_event_is_injected(nvml: Any, node_dir: str, xid_events: Any) -> None:
    injected_at: List[float] = []

    def inject() -> None:
        time.sleep(0.2)
        injected_at.append(time.monotonic())
        fgs.inject_xid(node_dir, 2, 79)

    injector = threading.Thread(target=inject)
    injector.start()
    data = nvml.nvmlEventSetWait_v2(xid_events, 10000)  # ctypes releases the GIL while C blocks
    returned_at = time.monotonic()
    injector.join()
    assert data.eventData == 79
    assert returned_at - injected_at[0] < 0.1


def test_two_waiting_processes_share_events_exactly_once(fake_nvml_lib: Path, node_dir: str) -> None:
    """The documented choice: events are a queue per node, each one goes to exactly one waiter."""
    waiter = textwrap.dedent(
        """
        import json, pynvml, sys
        pynvml.nvmlInit()
        events = pynvml.nvmlEventSetCreate()
        for i in range(pynvml.nvmlDeviceGetCount()):
            pynvml.nvmlDeviceRegisterEvents(pynvml.nvmlDeviceGetHandleByIndex(i), 8, events)
        print("ready", flush=True)
        got = []
        while True:
            try:
                data = pynvml.nvmlEventSetWait_v2(events, 1500)
            except pynvml.NVMLError_Timeout:
                break
            got.append([pynvml.nvmlDeviceGetIndex(data.device), data.eventData])
        print(json.dumps(got))
        """
    )
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_lib.parent), GPUFLEET_FAKE_NVML_DIR=node_dir)
    waiters = [
        subprocess.Popen([sys.executable, "-c", waiter], env=env, stdout=subprocess.PIPE, text=True)
        for _waiter in range(2)
    ]
    try:
        for proc in waiters:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        injected = [[gpu % 8, 1000 + n] for n, gpu in enumerate(range(60))]
        for gpu, xid in injected:
            fgs.inject_xid(node_dir, gpu, xid)
        outputs = [proc.communicate(timeout=30)[0] for proc in waiters]
    finally:
        for proc in waiters:
            if proc.poll() is None:
                proc.kill()
    delivered = [event for out in outputs for event in json.loads(out)]
    assert sorted(delivered) == sorted(injected), "every event exactly once across both processes"
    assert fgs.read(node_dir)["pending_events"] == []


# ---------------------------------------------------------------- lost GPU, clear


def test_lost_gpu_answers_gpu_is_lost_on_every_device_call(nvml: Any, node_dir: str, xid_events: Any) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex(4)
    uuid4 = nvml.nvmlDeviceGetUUID(handle)
    fgs.inject_xid(node_dir, 4, 79)
    fgs.set_lost(node_dir, 4)
    calls = [
        lambda: nvml.nvmlDeviceGetUUID(handle),
        lambda: nvml.nvmlDeviceGetIndex(handle),
        lambda: nvml.nvmlDeviceGetPciInfo(handle),
        lambda: nvml.nvmlDeviceGetTemperature(handle, 0),
        lambda: nvml.nvmlDeviceGetPowerUsage(handle),
        lambda: nvml.nvmlDeviceGetMemoryInfo(handle),
        lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0),
        lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle),
        lambda: nvml.nvmlDeviceGetRemappedRows(handle),
        lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
        lambda: nvml.nvmlDeviceGetNvLinkState(handle, 0),
        lambda: nvml.nvmlDeviceGetNvLinkErrorCounter(handle, 0, 0),
        lambda: nvml.nvmlDeviceGetSupportedEventTypes(handle),
        lambda: nvml.nvmlDeviceGetHandleByIndex(4),
        lambda: nvml.nvmlDeviceGetHandleByUUID(uuid4),
    ]
    for call in calls:
        with pytest.raises(nvml.NVMLError_GpuIsLost):
            call()
    # The XID that announced the loss is still delivered, and the node still counts the GPU.
    data = nvml.nvmlEventSetWait_v2(xid_events, 1000)
    assert data.eventData == 79
    assert ctypes.cast(data.device, ctypes.c_void_p).value == ctypes.cast(handle, ctypes.c_void_p).value
    assert nvml.nvmlDeviceGetCount() == 8
    assert nvml.nvmlDeviceGetTemperature(nvml.nvmlDeviceGetHandleByIndex(5), 0) == 35
    fgs.set_lost(node_dir, 4, lost=False)
    assert nvml.nvmlDeviceGetUUID(handle) == uuid4


def test_clear_all_returns_the_node_to_healthy(nvml: Any, node_dir: str, xid_events: Any) -> None:
    fgs.set_fields(node_dir, 0, temperature=99, ecc_dbe_volatile=4, throttle_reasons=0x40, nvlink_down=1)
    fgs.set_lost(node_dir, 1)
    fgs.inject_xid(node_dir, 2, 79)
    fgs.clear(node_dir)
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetTemperature(handle, 0) == 35
    assert nvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0) == 0
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(handle) == 0
    assert nvml.nvmlDeviceGetNvLinkState(handle, 0) == 1
    assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(1)) == fgs.read(node_dir)["gpus"][1]["uuid"]
    with pytest.raises(nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(xid_events, 50)


# ---------------------------------------------------------------- measurements


def full_snapshot(nvml: Any) -> List[Dict[str, Any]]:
    """Everything the health reader reads per GPU, NVLink included (18 links x state + 4 counters)."""
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(
            {
                "uuid": nvml.nvmlDeviceGetUUID(h),
                "name": nvml.nvmlDeviceGetName(h),
                "serial": nvml.nvmlDeviceGetSerial(h),
                "bus": nvml.nvmlDeviceGetPciInfo(h).busId,
                "temperature": nvml.nvmlDeviceGetTemperature(h, 0),
                "power": nvml.nvmlDeviceGetPowerUsage(h),
                "ecc": [nvml.nvmlDeviceGetTotalEccErrors(h, e, c) for e in (0, 1) for c in (0, 1)],
                "retired_pending": nvml.nvmlDeviceGetRetiredPagesPendingStatus(h),
                "remapped": nvml.nvmlDeviceGetRemappedRows(h),
                "reasons": nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                "nvlink": [
                    (
                        nvml.nvmlDeviceGetNvLinkState(h, link),
                        [nvml.nvmlDeviceGetNvLinkErrorCounter(h, link, c) for c in range(4)],
                    )
                    for link in range(NVLINK_LINKS)
                ],
            }
        )
    return gpus


def test_measure_delivery_latency_and_snapshot_cost(nvml: Any, node_dir: str, xid_events: Any) -> None:
    """Run with -s to see the numbers. The bounds are loose for a shared 2-core VM, but they catch
    the regressions seen while building it: closing the inotify fd per wait (p50 7 ms) and
    scanning only on a timer."""
    latencies_ms = []
    for n in range(200):
        injected_at: List[float] = []

        def inject(gpu: int, stamps: List[float]) -> None:
            time.sleep(0.002)
            stamps.append(time.perf_counter())
            fgs.inject_xid(node_dir, gpu, 79)

        injector = threading.Thread(target=inject, args=(n % 8, injected_at))
        injector.start()
        nvml.nvmlEventSetWait_v2(xid_events, 5000)
        returned_at = time.perf_counter()
        injector.join()
        latencies_ms.append((returned_at - injected_at[0]) * 1000)
    latencies_ms.sort()
    p50, p99 = statistics.median(latencies_ms), latencies_ms[int(len(latencies_ms) * 0.99) - 1]

    snapshot_ms = []
    for _attempt in range(20):
        start = time.perf_counter()
        snapshot = full_snapshot(nvml)
        snapshot_ms.append((time.perf_counter() - start) * 1000)
    calls = 1 + sum(1 + 12 + len(gpu["nvlink"]) * 5 for gpu in snapshot)
    print(
        f"\nXID injection -> nvmlEventSetWait_v2 return over 200 events: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
        f"max {latencies_ms[-1]:.2f} ms\nfull snapshot of 8 GPUs ({calls} pynvml calls): "
        f"median {statistics.median(snapshot_ms):.1f} ms, min {min(snapshot_ms):.1f} ms"
    )
    assert len(snapshot) == 8
    assert p50 < 5
    assert p99 < 50
    assert statistics.median(snapshot_ms) < 500
