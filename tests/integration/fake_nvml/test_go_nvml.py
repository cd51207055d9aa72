# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The fake libnvidia-ml.so.1 against NVIDIA's Go binding (go-nvml), the one the device plugin,
dcgm-exporter and GPUd use, and against every function nvml.h declares."""

from __future__ import annotations

import glob
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state as fgs

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
FAKE_NVML = REPO / "tools" / "fake-nvml"
PROBE_SRC = FAKE_NVML / "go-probe"
CACHE_DIR = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")
XID_EVENT = 0x8
NVML_BRAND_NVIDIA = 14
NVML_DEVICE_ARCH_HOPPER = 9


def nvml_header() -> Path:
    """The nvml.h the Makefile compiles against (same lookup: NVML_INCLUDE, else the repo's venv)."""
    if os.environ.get("NVML_INCLUDE"):
        return Path(os.environ["NVML_INCLUDE"]) / "nvml.h"
    found = sorted(glob.glob(str(REPO / ".venv/lib/python3*/site-packages/nvidia/cu*/include/nvml.h")))
    assert found, "nvml.h not found: install nvidia-nvml-dev into the repo's venv"
    return Path(found[0])


@pytest.fixture(scope="session")
def go_nvml_probe(fake_nvml_lib: Path) -> Path:
    """Build the go-nvml probe into the cache once per session (Go's build cache makes it cheap).

    A build failure fails the tests: the Go module proxy is reachable wherever they run.
    """
    out = CACHE_DIR / "fake-nvml" / "go-nvml-probe"
    env = dict(
        os.environ,
        GOMODCACHE=str(CACHE_DIR / "go" / "mod"),
        GOCACHE=str(CACHE_DIR / "go" / "build"),
        GOTOOLCHAIN="local",
        GOFLAGS="-mod=mod -trimpath",
        CGO_ENABLED="1",  # go-nvml is cgo; it dlopen()s libnvidia-ml.so.1 at nvml.Init()
        CGO_CFLAGS="-O2 -Wno-deprecated-declarations",  # go-nvml binds deprecated calls too
    )
    start = time.monotonic()
    build = subprocess.run(["go", "build", "-o", str(out), "."], cwd=PROBE_SRC, env=env,
                           capture_output=True, text=True, timeout=600, check=False)
    assert build.returncode == 0, f"go build of the go-nvml probe failed:\n{build.stdout}\n{build.stderr}"
    print(f"\ngo-nvml probe built in {time.monotonic() - start:.1f} s -> {out}", file=sys.stderr)
    return out


class ProbeOutput:
    """The probe's stdout lines, read by a thread so that waiting for one can time out."""

    def __init__(self, proc: "subprocess.Popen[str]") -> None:
        self.lines: "queue.Queue[str]" = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        threading.Thread(target=lambda: [self.lines.put(line) for line in stdout] + [self.lines.put("")],
                         daemon=True).start()

    def until(self, event: str, deadline: float) -> List[Dict[str, Any]]:
        """The JSON lines up to the first whose event is `event` (or error/timeout) or end of output."""
        got: List[Dict[str, Any]] = []
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise AssertionError(f"no {event!r} line from the probe in time; got {got}") from None
            if not line:
                return got
            got.append(json.loads(line))
            if got[-1]["event"] in (event, "error", "timeout"):
                return got


def test_go_nvml_lists_the_gpus_and_receives_an_injected_xid(
    go_nvml_probe: Path, fake_nvml_lib: Path, tmp_path: Path
) -> None:
    state_dir = str(tmp_path / "gpus" / "gpu-go-001")
    fgs.init(state_dir, 4, "gpu-go-001", "NVIDIA-H200-141GB-HBM3")
    state = fgs.read(state_dir)
    env = {
        "PATH": os.environ["PATH"],
        "LD_LIBRARY_PATH": str(fake_nvml_lib.parent),
        "GPUFLEET_FAKE_NVML_DIR": state_dir,
    }
    start = time.monotonic()
    proc = subprocess.Popen([str(go_nvml_probe), "--timeout-ms", "15000"], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        output = ProbeOutput(proc)
        listed = output.until("waiting", start + 15)
        assert listed[-1] == {"event": "waiting"}, listed
        injected = time.monotonic()
        fgs.inject_xid(state_dir, 2, 79)
        received = output.until("xid", injected + 10)
        assert proc.wait(timeout=10) == 0, (received, proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(f"\ngo-nvml probe: listed in {injected - start:.2f} s, XID after {time.monotonic() - injected:.3f} s",
          file=sys.stderr)

    init, gpus = listed[0], listed[1:-1]
    assert init == {"event": "init", "driver": state["node"]["driver_version"],
                    "cuda_driver": state["node"]["cuda_driver_version"], "count": 4}
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    for seen, want in zip(gpus, state["gpus"], strict=True):
        assert seen["name"] == want["name"] == "NVIDIA H200 141GB HBM3"
        assert seen["uuid"] == want["uuid"]
        assert seen["pci_bus_id"] == want["pci_bus_id"]
        assert seen["pci_device_id"] == want["pci_device_id"]
        assert seen["serial"] == want["serial"]
        assert seen["memory_total"] == want["memory_total"] == 141 * 2**30
        assert seen["memory_used"] == 0
        assert seen["cc"] == "9.0"
        assert seen["architecture"] == NVML_DEVICE_ARCH_HOPPER
        assert seen["brand"] == NVML_BRAND_NVIDIA
        assert seen["board_part_number"].startswith("699-")
        assert seen["minor_number"] == want["index"]
        assert seen["is_mig_device"] is False
        assert seen["mig_mode"] == "Not Supported"  # a generated stub, reached through go-nvml
    assert received == [{"event": "xid", "index": 2, "uuid": state["gpus"][2]["uuid"], "xid": 79,
                         "event_type": XID_EVENT}]
    assert fgs.read(state_dir)["pending_events"] == []


def test_go_nvml_times_out_without_an_event(go_nvml_probe: Path, fake_nvml_lib: Path, tmp_path: Path) -> None:
    state_dir = str(tmp_path / "gpus" / "gpu-go-002")
    fgs.init(state_dir, 1, "gpu-go-002", "NVIDIA-H100-80GB-HBM3")
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": str(fake_nvml_lib.parent),
           "GPUFLEET_FAKE_NVML_DIR": state_dir}
    done = subprocess.run([str(go_nvml_probe), "--timeout-ms", "200"], env=env, capture_output=True,
                          text=True, timeout=30, check=False)
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert (done.returncode, events) == (3, ["init", "gpu", "waiting", "timeout"]), done.stderr


def test_library_exports_every_function_nvml_h_declares(fake_nvml_lib: Path) -> None:
    """A header bump that adds functions must add them to the library too (gen_stubs.py does)."""
    listed = subprocess.run([sys.executable, str(FAKE_NVML / "gen_stubs.py"), "--header", str(nvml_header()),
                             "--list-declared"], capture_output=True, text=True, check=True)
    declared = set(listed.stdout.split())
    assert len(declared) > 400
    nm = subprocess.run(["nm", "-D", "--defined-only", str(fake_nvml_lib)], capture_output=True, text=True,
                        check=True)
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.split()[-2:-1] == ["T"]}
    assert sorted(declared - exported) == [], "declared in nvml.h but not exported"
    assert sorted(exported - declared) == [], "exported but not declared in nvml.h"


def test_gen_stubs_skips_what_the_fake_defines_and_stubs_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "stubs.c"
    gen = [sys.executable, str(FAKE_NVML / "gen_stubs.py"), "--header", str(nvml_header()),
           "--fake", str(FAKE_NVML / "fake_nvml.c")]
    subprocess.run([*gen, "--output", str(out)], check=True, capture_output=True)
    simulated = set(subprocess.run([*gen, "--list-simulated"], check=True, capture_output=True,
                                   text=True).stdout.split())
    text = out.read_text()
    stubbed = {line.split("(")[0].split()[-1] for line in text.splitlines() if line.startswith("EXPORT ")}
    assert {"nvmlInit_v2", "nvmlEventSetWait_v2", "nvmlDeviceGetCudaComputeCapability"} <= simulated
    assert not simulated & stubbed
    assert "nvmlDeviceGetPowerManagementLimit" in stubbed
    assert text.count("return NVML_ERROR_NOT_SUPPORTED;") == len(stubbed)
