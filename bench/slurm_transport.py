#!/usr/bin/env python
"""The Slurm client's two transports side by side: the CLI (scontrol, squeue, scancel) and slurmrestd
(JWT), on the same Slurm 26.05 lab, call by call.

Prints, for a cluster of 8 and of 64 nodes, the median and p90 milliseconds of each call through
each transport, and REST/CLI: nodes() without jobs, nodes() with their jobs (one more listing),
set_node_state DRAIN then RESUME (one pair), signal_jobs (SIGCONT, which changes nothing, to a
running job), and the agent's fast fence: a fatal verdict to the node DRAIN in slurmctld (a new
client per fence, as the agent makes it; the RESUME after it untimed). The calls alternate CLI, REST,
CLI, ... so both see the same machine load.

It brings up its own Slurm-only lab (the slurm role with slurm_lab_version 26.05; directory
/var/tmp/gpufleet-bench-slurm, ports 27817, 27820 and 28001-) and takes it down at the end.
Run: .venv/bin/python bench/slurm_transport.py [--sizes 8 64] [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from lab_harness import TEST_LAB_VARS, Lab, lab_processes, run_playbook

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.fast_fence import FastFence, fence_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import SlurmRestClient, TokenSource
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

LAB_DIR = Path("/var/tmp/gpufleet-bench-slurm")
BOOKS = REPO / "tests" / "integration" / "slurm" / "files"
# Below the ephemeral range (32768-60999): a slurmd port there can be held by an outgoing connection.
PORTS = {"slurm_slurmctld_port": 27817, "slurm_slurmrestd_port": 27820, "slurm_slurmd_port_base": 28001}


def lab_of(nodes: int) -> Lab:
    pool = dict(TEST_LAB_VARS["gpufleet_node_pools"][0], count=nodes, spares=1)
    return Lab(lab_dir=LAB_DIR, extra_vars=dict(PORTS, slurm_lab_version="26.05", gpufleet_node_pools=[pool]))


def play(lab: Lab, book: str) -> None:
    variables = dict(lab.extra_vars, gpufleet_lab_dir=str(lab.lab_dir))
    result = run_playbook([str(BOOKS / book), "-e", json.dumps(variables)], lab.env())
    if result.rc != 0:
        raise SystemExit("%s failed:\n%s" % (book, result.output[-4000:]))


def measure(calls: Dict[str, Callable[[], object]], rounds: int, pause: float = 0.0) -> Dict[str, List[float]]:
    times: Dict[str, List[float]] = {name: [] for name in calls}
    for _round in range(rounds):
        for name, call in calls.items():  # alternating: the same load for both
            began = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - began) * 1000.0)
            # Untimed: slurmctld answers "Job can not be altered now, try again later" to a signal
            # that comes while the last one to the same job is still being delivered.
            time.sleep(pause)
    return times


def row(label: str, cli: List[float], rest: List[float]) -> str:
    def p90(values: List[float]) -> float:
        return sorted(values)[int(0.9 * (len(values) - 1))]

    return "  %-32s CLI %7.1f ms (p90 %7.1f)   REST %7.1f ms (p90 %7.1f)   REST/CLI %.2f" % (
        label, statistics.median(cli), p90(cli), statistics.median(rest), p90(rest),
        statistics.median(rest) / statistics.median(cli))


def bench(nodes: int, rounds: int) -> None:
    lab = lab_of(nodes)
    if LAB_DIR.exists():
        play(lab, "slurm-lab-down.yml")
        shutil.rmtree(LAB_DIR)
    try:
        play(lab, "slurm-lab-up.yml")  # inside the try: a bring-up that fails halfway is taken down too
        cli = SlurmClient(SlurmRunner(slurm_conf=str(lab.slurm_conf), bin_dir=str(LAB_DIR / "bin")))
        rest = SlurmRestClient("http://127.0.0.1:%d" % PORTS["slurm_slurmrestd_port"],
                               TokenSource("root", jwt_key_file=str(LAB_DIR / "slurm" / "jwt" / "jwt_hs256.key")))
        rest.parser()  # the one-time /openapi/v3 look, outside the timings
        job = subprocess.run([str(LAB_DIR / "bin" / "sbatch"), "--parsable", "--output=/dev/null", "--wrap",
                              "sleep 3600"], env=lab.env(), capture_output=True, text=True, check=True).stdout.strip()
        while not [j for j in cli.jobs() if j.job_id == job and j.state == "RUNNING"]:
            time.sleep(0.2)
        node = "%s-%03d" % (lab.extra_vars["gpufleet_node_pools"][0]["name"], nodes)

        def drain_resume(client) -> Callable[[], None]:
            def call() -> None:
                client.set_node_state(node, "DRAIN", "gpufleet: bench")
                client.set_node_state(node, "RESUME")
            return call

        def fence_once(params: Dict[str, object]) -> float:
            """Milliseconds from the verdict to the node DRAIN (the fence's own thread, a new client)."""
            fenced = threading.Event()
            fence = FastFence(node, lambda: fence_client(params), on_error=print,
                              on_fenced=lambda outcome, reason: fenced.set())
            fence.start()
            began = time.perf_counter()
            fence.update(True, "gpufleet: Xid79 GPU 3 (agent fast fence)")
            fenced.wait(30)
            took = (time.perf_counter() - began) * 1000.0
            fence.stop()
            cli.set_node_state(node, "RESUME")
            return took

        groups = [
            ("nodes() without jobs", lambda: cli.nodes(with_jobs=False), lambda: rest.nodes(with_jobs=False)),
            ("nodes() with their jobs", cli.nodes, rest.nodes),
            ("set_node_state DRAIN + RESUME", drain_resume(cli), drain_resume(rest)),
            ("signal_jobs (SIGCONT)", lambda: cli.signal_jobs([job], "CONT"), lambda: rest.signal_jobs([job], "CONT")),
        ]
        assert cli.nodes(with_jobs=False) == rest.nodes(with_jobs=False), "the transports disagree"
        print("%d nodes (Slurm %s), %d rounds each:" % (nodes, cli.version(), rounds))
        for label, cli_call, rest_call in groups:
            times = measure({"cli": cli_call, "rest": rest_call}, rounds, pause=0.5 if "signal" in label else 0.0)
            print(row(label, times["cli"], times["rest"]))
        fences: Dict[str, List[float]] = {"cli": [], "rest": []}
        params = {"cli": {"slurm_conf": str(lab.slurm_conf), "bin_dir": str(LAB_DIR / "bin")},
                  "rest": {"slurm_api": "rest", "rest_url": rest.url,
                           "rest_jwt_key_file": str(LAB_DIR / "slurm" / "jwt" / "jwt_hs256.key")}}
        for _round in range(rounds):
            for name in ("cli", "rest"):
                fences[name].append(fence_once(params[name]))
        print(row("fast fence: verdict -> DRAIN", fences["cli"], fences["rest"]))
        cli.cancel([job])
    finally:
        play(lab, "slurm-lab-down.yml")
        left = lab_processes(LAB_DIR)
        if left:
            print("processes left after the bench lab's teardown: %s" % left)
        shutil.rmtree(LAB_DIR, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    for nodes in args.sizes:
        bench(nodes, args.rounds)


if __name__ == "__main__":
    main()
