#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NVML reader against a real driver, side by side with the lab's fake NVML.

Runs the collection's own NvmlReader (and the gpu_health verdict) on the NVML library the
loader finds, and, when --fake-lib is given, on the fake libnvidia-ml.so.1 with a fresh
simulated node of the same GPU count and product. Prints, per field of a health snapshot,
whether each library supports it and what it read, then the snapshot and event-wait timings.

    python3 bench/real_nvml.py [--fake-lib ~/.cache/gpufleet/fake-nvml/libnvidia-ml.so.1] [--json OUT]

Needs only nvidia-ml-py (pynvml); the repo is made importable as the collection here, so it
runs on a GPU machine without Ansible. Read-only: it never changes a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
_COLLECTIONS = pathlib.Path(tempfile.mkdtemp(prefix="gpufleet-collections-"))
(_COLLECTIONS / "ansible_collections" / "gpufleet").mkdir(parents=True)
(_COLLECTIONS / "ansible_collections" / "gpufleet" / "resilience").symlink_to(REPO)
sys.path.insert(0, str(_COLLECTIONS))

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import Thresholds
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.nvml import NvmlReader
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import evaluate

SNAPSHOT_ROUNDS = 50


def read(library_path: Optional[str]) -> Dict[str, Any]:
    """Inventory, one snapshot per GPU, snapshot timings, an event wait and the verdict."""
    with NvmlReader(library_path) as reader:
        inventory = [dataclasses.asdict(gpu) for gpu in reader.inventory()]
        snapshots = reader.snapshot()
        timings: List[float] = []
        for _round in range(SNAPSHOT_ROUNDS):
            began = time.perf_counter()
            reader.snapshot()
            timings.append((time.perf_counter() - began) * 1000.0)
        began = time.perf_counter()
        try:
            events = reader.wait_for_xid(timeout=1.0)
            wait = {"ok": True, "events": len(events)}
        except Exception as exc:  # what the real driver says here is the finding
            wait = {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        wait["seconds"] = round(time.perf_counter() - began, 3)
        verdict = evaluate([], snapshots, Thresholds()).to_dict()
    timings.sort()
    return {
        "inventory": inventory,
        "snapshots": [s.to_dict() for s in snapshots],
        "snapshot_ms": {
            "gpus": len(snapshots),
            "median": round(statistics.median(timings), 3),
            "p90": round(timings[int(0.9 * (len(timings) - 1))], 3),
            "max": round(timings[-1], 3),
        },
        "event_wait": wait,
        "verdict": verdict,
    }


def read_in_child(library_path: Optional[str], env: Dict[str, str]) -> Dict[str, Any]:
    """One library per process: pynvml binds the first libnvidia-ml.so.1 it loads for good."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="gpufleet-nvml-")) / "read.json"
    argv = [sys.executable, __file__, "--read-one", out.as_posix()]
    if library_path:
        argv += ["--library", library_path]
    subprocess.run(argv, check=True, env=dict(os.environ, **env), timeout=300)
    return json.loads(out.read_text())


def fake_node_env(count: int, product: str) -> Dict[str, str]:
    from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

    state_dir = tempfile.mkdtemp(prefix="gpufleet-fake-node-")
    fake_gpu_state.init(state_dir, count, "bench-node", product)
    return {"GPUFLEET_FAKE_NVML_DIR": state_dir}


def _links(links: List[Dict[str, Any]]) -> str:
    """How many links, how many active, and which error counters the library answers."""
    counters = sorted({k for link in links for k, v in link.items() if k not in ("link", "active") and v is not None})
    active = sum(1 for link in links if link.get("active"))
    return "%d links, %d active, counters: %s" % (len(links), active, ",".join(counters) or "none")


def compare(real: Dict[str, Any], fake: Optional[Dict[str, Any]]) -> List[str]:
    lines = ["%-30s %-28s %s" % ("field (GPU 0)", "real", "fake" if fake else "")]
    real0 = real["snapshots"][0] if real["snapshots"] else {}
    fake0 = fake["snapshots"][0] if fake and fake["snapshots"] else {}
    for key in real0:
        if key == "nvlinks":
            shown_real = _links(real0[key])
            shown_fake = _links(fake0.get(key, [])) if fake else ""
        else:
            shown_real = "NOT SUPPORTED" if real0[key] is None else repr(real0[key])
            shown_fake = ("NOT SUPPORTED" if fake0.get(key) is None else repr(fake0.get(key))) if fake else ""
        width = 80 if key == "nvlinks" else 28
        lines.append("%-30s %-28s %s" % (key, shown_real[:width], shown_fake[:width]))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake-lib", help="path of the fake libnvidia-ml.so.1 to compare with")
    parser.add_argument("--json", help="write everything read to this file")
    parser.add_argument("--read-one", help=argparse.SUPPRESS)
    parser.add_argument("--library", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_one:
        pathlib.Path(args.read_one).write_text(json.dumps(read(args.library), default=str))
        return 0

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
        print("nvidia-smi:", smi.stdout.strip() or smi.stderr.strip())
    except OSError as exc:
        print("nvidia-smi: not available (%s)" % exc)
    real = read_in_child(None, {})
    product = (real["inventory"][0].get("name") or "NVIDIA H200").replace(" ", "-") if real["inventory"] else "H200"
    fake = None
    if args.fake_lib:
        fake = read_in_child(args.fake_lib, fake_node_env(len(real["snapshots"]), product))

    print("\n".join(compare(real, fake)))
    for name, result in (("real", real), ("fake", fake)):
        if result is None:
            continue
        print("%s: snapshot of %d GPU(s) median %.3f ms, p90 %.3f ms, max %.3f ms; event wait %s; verdict %s"
              % (name, result["snapshot_ms"]["gpus"], result["snapshot_ms"]["median"], result["snapshot_ms"]["p90"],
                 result["snapshot_ms"]["max"], result["event_wait"], result["verdict"].get("verdict")))
        if result["verdict"].get("faults"):
            print("%s: faults %s" % (name, result["verdict"]["faults"]))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"real": real, "fake": fake}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
