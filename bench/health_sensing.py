#!/usr/bin/env python
"""Benchmark of GPU health sensing, against the lab's fake libnvidia-ml.so.1.

Prints:
  * the cost of one full NVML snapshot of 8 GPUs (inventory is read once; the
    snapshot is what the agent repeats every poll);
  * the XID latency, from injection into the fake library's state to
    NvmlReader.wait_for_xid() returning, p50/p99 over 200 events;
  * the kernel-log parser throughput in lines/s on a 100k-line log.

Run: make bench, or PYTHONPATH=collections .venv/bin/python bench/health_sensing.py
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.kernel_log import parse_kernel_log
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.nvml import NvmlReader
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

CACHE = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")


def percentile(samples, pct):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100.0 * (len(ordered) - 1)))]


def build_library() -> Path:
    subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO / "tools" / "fake-nvml")], check=True)
    return CACHE / "fake-nvml" / "libnvidia-ml.so.1"


def bench_snapshot(reader: NvmlReader, rounds: int = 200) -> None:
    reader.snapshot()  # warm the fake's state cache
    samples = []
    for _round in range(rounds):
        began = time.perf_counter()
        snapshots = reader.snapshot()
        samples.append(time.perf_counter() - began)
    assert len(snapshots) == 8
    links = sum(len(s.nvlinks) for s in snapshots)
    print("snapshot of 8 GPUs (%d NVLinks):  median %.2f ms  p99 %.2f ms  (%d rounds)"
          % (links, statistics.median(samples) * 1e3, percentile(samples, 99) * 1e3, rounds))


def inject_later(state_dir: str, gpu: int, stamp: dict) -> None:
    time.sleep(random.uniform(0.002, 0.006))  # let the waiter block first
    stamp["t"] = time.perf_counter()
    fake_gpu_state.inject_xid(state_dir, gpu=gpu, xid=79)


def bench_xid_latency(reader: NvmlReader, state_dir: str, events: int = 200) -> None:
    reader.watch_xids()
    latencies = []
    for n in range(events):
        stamp = {}
        injector = threading.Thread(target=inject_later, args=(state_dir, n % 8, stamp))
        injector.start()
        got = reader.wait_for_xid(5.0)
        returned = time.perf_counter()
        injector.join()
        assert got and got[0].xid == 79, got
        latencies.append(returned - stamp["t"])
    print("XID injection -> wait_for_xid:    p50 %.2f ms  p99 %.2f ms  max %.2f ms  (%d events)"
          % (percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3, max(latencies) * 1e3, events))


def bench_parser(lines_total: int = 100_000) -> None:
    rng = random.Random(7)
    noise = [
        "[ %d.%06d] eth0: link up, 100Gbps, full duplex",
        "[ %d.%06d] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode",
        "[ %d.%06d] audit: type=1400 apparmor=\"STATUS\" operation=\"profile_load\"",
        "[ %d.%06d] mlx5_core 0000:1a:00.0: mlx5_cmd_check:756: failed",
    ]
    faults = [
        "[ %d.%06d] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
        "[ %d.%06d] NVRM: Xid (PCI:0000:1b:00 GPU-I:01 GPU-CI:00): 31, pid='<unknown>', name=<unknown>, MMU Fault",
        "[ %d.%06d] NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None)"
        " to 0x1 (GPU Reset Required)",
        "[ %d.%06d] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 LTSSM Fault Up",
    ]
    lines = []
    for n in range(lines_total):
        template = rng.choice(faults) if rng.random() < 0.02 else rng.choice(noise)
        lines.append(template % (n // 1000, n % 1000000))
    began = time.perf_counter()
    events = parse_kernel_log(lines)
    elapsed = time.perf_counter() - began
    print("kernel-log parser:               %.0f lines/s  (%d lines, %d events, %.3f s)" % (
        lines_total / elapsed, lines_total, len(events), elapsed))


def main() -> None:
    library = build_library()
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as state_dir:
        fake_gpu_state.init(state_dir, count=8, node="bench-001", product="NVIDIA-H100-80GB-HBM3")
        os.environ["GPUFLEET_FAKE_NVML_DIR"] = state_dir
        print("gpufleet.resilience health-sensing benchmark (fake NVML %s, %d CPUs)" % (library, os.cpu_count()))
        with NvmlReader(str(library)) as reader:
            bench_snapshot(reader)
            bench_xid_latency(reader, state_dir)
    bench_parser()


if __name__ == "__main__":
    main()
