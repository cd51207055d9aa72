#!/usr/bin/env python
"""Benchmark of the lab (8 GPU nodes x 8 GPUs), with the Go binaries already cached.

Prints:
  * cold bring-up: one-click-slurm.yml on an empty lab directory (new certs, etcd, Slurm state);
  * warm bring-up: lab-down, then one-click-slurm.yml again on the kept state;
  * the idempotent rerun of one-click-slurm.yml (and its changed count, which must be 0);
  * memory per lab Slurm node (slurmd RSS) and of the control plane;
  * how many kwok nodes the lab API server holds all Ready (default 1,000), the time to get
    there, and the memory of apiserver, etcd, controller-manager, scheduler and kwok then.

It uses its own lab directory and ports, so it runs beside `make lab`, and takes the lab down
at the end. Run: make bench, or .venv/bin/python bench/lab.py [--nodes 1000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from lab_harness import TEST_LAB_VARS, Lab, lab_processes

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    expand_pools,
    node_as_dict,
    parse_pools,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.node_layout import kwok_node_manifest

BENCH_VARS = dict(TEST_LAB_VARS)
BENCH_VARS.update({
    "kubernetes_lab_etcd_client_port": 18379, "kubernetes_lab_etcd_peer_port": 18380,
    "kubernetes_lab_apiserver_port": 18443, "kubernetes_lab_controller_manager_port": 18257,
    "kubernetes_lab_scheduler_port": 18259, "kubernetes_lab_kwok_port": 18247,
    "slurm_slurmctld_port": 18817, "slurm_slurmd_port_base": 19001,
    "health_agent_lab_port_base": 18400, "monitoring_prometheus_port": 18090, "monitoring_alertmanager_port": 18093,
    "self_healing_webhook_port": 18500, "monitoring_alert_webhook_url": "http://127.0.0.1:18500/endpoint",
    "gpufleet_node_pools": [dict(TEST_LAB_VARS["gpufleet_node_pools"][0], count=8, nodes_per_rack=4)],
})


def rss_mib(pid: int) -> float:
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def timed(lab: Lab, playbook: str) -> tuple:
    began = time.monotonic()
    result = lab.playbook(playbook)
    elapsed = time.monotonic() - began
    if result.rc != 0:
        sys.exit("%s failed:\n%s" % (playbook, result.output[-4000:]))
    return elapsed, result


def memory_report(lab: Lab) -> None:
    pids = lab.recorded_pids()
    slurmd = [rss_mib(pid) for name, pid in pids.items() if name.startswith("slurmd-")]
    print("memory per lab Slurm node:  slurmd RSS %.1f MiB (mean of %d)" % (sum(slurmd) / len(slurmd), len(slurmd)))
    for name in ("slurmctld", "munged", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"):
        if name in pids:
            print("  %-24s %7.1f MiB" % (name, rss_mib(pids[name])))


def scale_nodes(lab: Lab, count: int) -> None:
    from kubernetes.client.exceptions import ApiException

    api = lab.kube()
    # Node names have 3 digits, so a pool holds at most 999 nodes: split the count.
    template = dict(BENCH_VARS["gpufleet_node_pools"][0], spares=0)
    pools = [dict(template, name="scale%d" % n, count=min(500, count - start))
             for n, start in enumerate(range(0, count, 500))]
    began = time.monotonic()
    for node in expand_pools(parse_pools(pools)):
        try:
            api.create_node(kwok_node_manifest(node_as_dict(node)))
        except ApiException as exc:
            if exc.status != 409:
                raise
    created = time.monotonic() - began
    deadline = time.monotonic() + 900
    ready = 0
    while time.monotonic() < deadline:
        nodes = api.list_node(label_selector="gpufleet.io/pool in (%s)" % ",".join(p["name"] for p in pools)).items
        ready = sum(1 for n in nodes
                    if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []))
        if ready == count:
            break
        time.sleep(2)
    elapsed = time.monotonic() - began
    print("kwok scale: %d/%d nodes Ready %.1f s after the first create (creating took %.1f s)"
          % (ready, count, elapsed, created))
    memory_report(lab)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--nodes", type=int, default=1000, help="kwok nodes for the scale test (0 to skip)")
    parser.add_argument("--lab-dir", default="/var/tmp/gpufleet-bench-lab")
    args = parser.parse_args()
    lab = Lab(lab_dir=Path(args.lab_dir), extra_vars=BENCH_VARS)
    if lab.lab_dir.exists():
        lab.playbook("lab-down.yml")
        shutil.rmtree(lab.lab_dir)
    print("gpufleet.resilience lab benchmark: 8 GPU nodes x 8 GPUs, binaries cached")
    try:
        cold = timed(lab, "one-click-slurm.yml")[0]
        print("cold bring-up (empty lab dir):        %6.1f s" % cold)
        rerun, result = timed(lab, "one-click-slurm.yml")
        print("idempotent rerun of one-click-slurm:  %6.1f s  changed=%d" % (rerun, result.changed))
        memory_report(lab)
        down = timed(lab, "lab-down.yml")[0]
        warm = timed(lab, "one-click-slurm.yml")[0]
        print("lab-down:                             %6.1f s" % down)
        print("warm bring-up (state kept):           %6.1f s" % warm)
        if args.nodes:
            scale_nodes(lab, args.nodes)
    finally:
        lab.playbook("lab-down.yml")
        left = lab_processes(lab.lab_dir)
        print("after lab-down: %d lab processes left" % len(left))


if __name__ == "__main__":
    main()
