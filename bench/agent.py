#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Benchmarks of the health agent (issue figures P1, P5 and API load).

    .venv/bin/python bench/agent.py p1 [--faults 100]
        fault injected -> agent event, p50/p99, for NVML events and for kernel-log lines: one agent
        process on a fake 8-GPU node (Kubernetes off). "detected" is the agent's own stamp of the
        event; "journaled" is when the bench saw the JSON line in the journal file.
    .venv/bin/python bench/agent.py p5 [--seconds 300] [--hcas 8] [--job-ranks 8] [--before DIR]
        one agent, 8 GPUs, 1 Hz snapshots, idle fleet: CPU % of one core and RSS over the run.
        The fake NVML library runs inside the agent process, so its file reads count as agent CPU
        (a real driver answers through ioctls instead). Two phases of that length: unscraped, then
        scraped once a second with Prometheus's Accept and Accept-Encoding headers. With --hcas or
        --job-ranks, a second agent runs beside the first over the same phases: its node has that
        many InfiniBand HCAs (one port each, in a fake sysfs tree) and a job of that many ranks whose
        progress files the bench touches once a second, so the two figures differ only by what the
        agent reads of the network and the jobs. With --before DIR (a checkout, e.g. `git worktree add
        /tmp/before <ref>`), an agent of each kind runs that checkout's code beside them.
    .venv/bin/python bench/agent.py exposition [--rounds 200]
        one scrape's CPU for 8 GPUs, side by side in one process: prometheus-client's own server
        (OpenMetrics and gzip, what Prometheus asks for) against the agent's Exposition.
    .venv/bin/python bench/agent.py lab [--faults 20] [--api-nodes 1000] [--api-seconds 120]
        brings up a lab of its own (ports 18xxx, like bench/lab.py) with agents and monitoring, then:
        fault -> GpuHealthy condition on the API server, fault -> alert firing in Alertmanager,
        and the API load of 1,000 agents' condition publishers in steady state against the lab
        API server holding 1,000 kwok nodes. Takes the lab down at the end.

Figures are printed; docs/benchmarks.md keeps the measured ones.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state, fake_ib

CACHE = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet")
FAKE_LIB = CACHE / "fake-nvml" / "libnvidia-ml.so.1"
AGENT_MODULE = "ansible_collections.gpufleet.resilience.plugins.module_utils.agent"
GPUS = 8


def percentile(values: List[float], pct: float) -> float:
    ordered = sorted(values)
    # Nearest rank: the smallest value with at least pct % of the values at or below it.
    index = min(len(ordered) - 1, max(0, math.ceil(pct / 100.0 * len(ordered)) - 1))
    return ordered[index]


def summary(name: str, seconds: List[float]) -> str:
    ms = [value * 1000.0 for value in seconds]
    return "%-34s n=%-4d p50 %8.2f ms   p99 %8.2f ms   max %8.2f ms" % (
        name, len(ms), statistics.median(ms), percentile(ms, 99), max(ms))


class LocalAgent:
    """One agent process on a fresh fake node in a temporary directory."""

    def __init__(self, port: int, interval: float = 1.0, hcas: int = 0, job_ranks: int = 0,
                 repo: Path = REPO) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpufleet-bench-agent-"))
        self.gpus = self.dir / "gpus"
        self.kmsg = self.dir / "kmsg.log"
        self.journal = self.dir / "events.jsonl"
        self.progress = self.dir / "progress"
        fake_gpu_state.init(str(self.gpus), GPUS, "bench-node", "NVIDIA-H100-80GB-HBM3")
        self.kmsg.write_text("")
        # Always the agent's own directories, never the machine's /sys or /run: with none asked for,
        # the tree has no HCA and the directory no job.
        (self.dir / "sys" / "class").mkdir(parents=True)
        if hcas:
            fake_ib.create_tree(str(self.dir / "sys"), ["mlx5_%d" % index for index in range(hcas)])
        self.progress_files = [self.progress / ("4242.%d" % rank) for rank in range(job_ranks)]
        config = self.dir / "agent.yml"
        config.write_text(json.dumps({
            "node": "bench-node", "interval": interval, "nvml": {"library_path": str(FAKE_LIB)},
            "kernel_log": {"source": "file", "path": str(self.kmsg)}, "metrics": {"port": port},
            "kubernetes": {"enabled": False}, "journal": str(self.journal), "log_level": "warning",
            "infiniband": {"sysfs_root": str(self.dir / "sys")}, "jobs": {"progress_dir": str(self.progress)},
        }))
        env = dict(os.environ, GPUFLEET_FAKE_NVML_DIR=str(self.gpus), PYTHONPATH=str(repo / "collections"))
        self.log = open(self.dir / "agent.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([sys.executable, "-m", AGENT_MODULE, "--config", str(config)], env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        self.port = port
        self._wait_ready()
        self.step = 0
        self.touch_progress()

    def touch_progress(self) -> None:
        """What each rank of a training job does as it works (train_sim writes the same)."""
        self.step += 1
        for path in self.progress_files:
            path.write_text(json.dumps({"step": self.step}))

    def _wait_ready(self) -> None:
        import urllib.request

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port, timeout=1) as answer:
                    if b"gpufleet_agent_last_snapshot_timestamp_seconds" in answer.read():
                        return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("the agent did not start: %s" % (self.dir / "agent.log").read_text()[-2000:])

    def journal_lines(self) -> List[dict]:
        if not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines() if line.strip()]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(10)
        self.log.close()


def wait_journal(agent: LocalAgent, count: int, timeout: float = 5.0) -> Optional[float]:
    """Poll (1 ms) until the journal has ``count`` lines; when it did, by the bench's clock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.journal.exists() and agent.journal.read_bytes().count(b"\n") >= count:
            return time.time()
        time.sleep(0.001)
    return None


def bench_p1(faults: int) -> None:
    agent = LocalAgent(port=18950)
    try:
        results: Dict[str, Dict[str, List[float]]] = {}
        seen = 0
        for source in ("nvml", "kernel_log"):
            detected: List[float] = []
            journaled: List[float] = []
            for number in range(faults):
                gpu = number % GPUS
                injected = time.time()
                if source == "nvml":
                    fake_gpu_state.inject_xid(str(agent.gpus), gpu, 79)
                else:
                    pci = "0000:%02x:00.0" % (0x1B + gpu)  # any PCI id: the line is judged either way
                    with open(agent.kmsg, "a") as handle:
                        handle.write("NVRM: Xid (PCI:%s): 48, pid=4242, name=python, DBE (0x1 0x2)\n" % pci)
                seen += 1
                visible = wait_journal(agent, seen)
                if visible is None:
                    raise SystemExit("fault %d (%s) never reached the journal" % (number, source))
                record = agent.journal_lines()[-1]
                detected.append(record["time"] - injected)
                journaled.append(visible - injected)
                time.sleep(0.02)
            results[source] = {"detected": detected, "journaled": journaled}
            time.sleep(6)  # past the agent's cross-source duplicate window
        print("P1: fault injected -> agent event (%d faults per source, one agent, 8 fake GPUs)" % faults)
        for source, figures in results.items():
            print("  " + summary("%s: detected" % source, figures["detected"]))
            print("  " + summary("%s: journal line visible" % source, figures["journaled"]))
    finally:
        agent.stop()


def cpu_seconds(pid: int) -> float:
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


# What Prometheus 2.x sends with each scrape: OpenMetrics first, gzip.
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def agents_share(agents: List[LocalAgent], seconds: int, scrape: bool) -> List[tuple]:
    """CPU % of one core and peak RSS of each agent over the same ``seconds``, scraped once a second
    or not. The job's progress files are touched once a second either way (by the bench, whose CPU
    is not counted)."""
    start = [(cpu_seconds(agent.process.pid), time.monotonic()) for agent in agents]
    peaks = [0.0] * len(agents)
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        for index, agent in enumerate(agents):
            agent.touch_progress()
            if scrape:
                request = urllib.request.Request("http://127.0.0.1:%d/metrics" % agent.port, headers=PROMETHEUS_HEADERS)
                with urllib.request.urlopen(request, timeout=5) as answer:
                    answer.read()
            peaks[index] = max(peaks[index], rss_mib(agent.process.pid))
        time.sleep(1.0)
    results = []
    for (cpu0, wall0), agent, peak in zip(start, agents, peaks, strict=True):
        results.append((100.0 * (cpu_seconds(agent.process.pid) - cpu0) / (time.monotonic() - wall0), peak))
    return results


def bench_p5(seconds: int, hcas: int, job_ranks: int, before: Optional[Path]) -> None:
    kinds = [("GPUs only", 0, 0)]
    if hcas or job_ranks:
        kinds.append(("%d HCAs, a job of %d ranks" % (hcas, job_ranks), hcas, job_ranks))
    # Each kind runs with this checkout's code, and with --before's beside it over the same phases.
    runs = [(name, kind_hcas, ranks, None) for name, kind_hcas, ranks in kinds]
    if before is not None:
        runs += [(name + ", --before", kind_hcas, ranks, before.resolve()) for name, kind_hcas, ranks in kinds]
    agents: List[LocalAgent] = []
    try:
        for number, (_name, kind_hcas, ranks, repo) in enumerate(runs):
            agents.append(LocalAgent(port=18951 + number, hcas=kind_hcas, job_ranks=ranks,
                                     **({"repo": repo} if repo is not None else {})))
        time.sleep(3)  # start-up (imports, NVML open) is not steady state
        idle = agents_share(agents, seconds, scrape=False)
        scraped = agents_share(agents, seconds, scrape=True)
        print("P5: one agent, %d fake GPUs, 1 Hz snapshots, %d s each phase, %s" % (
            GPUS, seconds, "%d agents side by side" % len(agents) if len(agents) > 1 else "one agent"))
        phases = zip(runs, idle, scraped, strict=True)
        for (name, *_rest), (idle_cpu, idle_peak), (scraped_cpu, scraped_peak) in phases:
            print("  %-36s CPU %.3f %% of one core unscraped, %.3f %% scraped every second as Prometheus does; "
                  "RSS peak %.1f / %.1f MiB" % (name, idle_cpu, scraped_cpu, idle_peak, scraped_peak))
    finally:
        for agent in agents:
            agent.stop()


def bench_exposition(rounds: int) -> None:
    """One scrape's CPU, in this process, for an 8-GPU view: what prometheus-client's own server
    gave Prometheus (OpenMetrics, gzip -9) against the agent's Exposition (text format, NVLink
    text kept), side by side."""
    import gzip
    import itertools

    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
    from prometheus_client.registry import CollectorRegistry

    from ansible_collections.gpufleet.resilience.plugins.module_utils.agent import metrics
    from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import GpuSnapshot, NvLinkStatus

    def snapshot(index: int) -> GpuSnapshot:
        links = tuple(NvLinkStatus(link=link, active=True, crc_flit_errors=0, crc_data_errors=0, replay_errors=0,
                                   recovery_errors=0) for link in range(18))
        return GpuSnapshot(index=index, uuid="GPU-%d" % index, temperature_c=40, power_w=100.0, ecc_sbe_volatile=0,
                           ecc_dbe_volatile=0, remapped_rows_correctable=0, remapped_rows_pending=False,
                           throttle_reasons=0, nvlinks=links)

    def view() -> "metrics.MetricsView":
        # A new snapshot each time, equal to the last: what an idle node's agent has between scrapes.
        return metrics.MetricsView(node="n", version="bench", driver_version="580", kernel_log_source="file",
                                   up=True, snapshots=[snapshot(i) for i in range(GPUS)],
                                   gpu_states={i: "healthy" for i in range(GPUS)},
                                   uuids={i: "GPU-%d" % i for i in range(GPUS)})

    def before() -> bytes:
        current = view()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics._Families(lambda: itertools.chain(
            metrics.families(current), metrics._nvlink_families(current.snapshots, current.uuids))))
        return gzip.compress(openmetrics_latest(registry))

    exposition = metrics.Exposition(view)
    timings = {}
    for name, scrape in (("prometheus-client server (OpenMetrics, gzip)", before), ("Exposition", exposition.render)):
        scrape()
        started = time.process_time()
        for _round in range(rounds):
            scrape()
        timings[name] = 1000.0 * (time.process_time() - started) / rounds
    old, new = list(timings.values())
    print("Exposition of %d GPUs, CPU per scrape over %d scrapes: %s; ratio %.1fx"
          % (GPUS, rounds, ", ".join("%s %.2f ms" % item for item in timings.items()), old / new))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p1 = commands.add_parser("p1")
    p1.add_argument("--faults", type=int, default=100)
    p5 = commands.add_parser("p5")
    p5.add_argument("--seconds", type=int, default=300, help="for each phase: unscraped, then scraped")
    p5.add_argument("--hcas", type=int, default=0, help="a second agent beside the first, with this many HCAs")
    p5.add_argument("--job-ranks", type=int, default=0, help="and a running job of this many ranks")
    p5.add_argument("--before", type=Path, help="a checkout whose agent runs beside each of the others")
    exposition = commands.add_parser("exposition")
    exposition.add_argument("--rounds", type=int, default=200)
    lab = commands.add_parser("lab")
    lab.add_argument("--faults", type=int, default=20)
    lab.add_argument("--api-nodes", type=int, default=1000)
    lab.add_argument("--api-seconds", type=int, default=120)
    lab.add_argument("--heartbeat", type=float, default=30.0)
    args = parser.parse_args()
    if not FAKE_LIB.is_file():
        raise SystemExit("build the fake NVML first: make fake-nvml")
    if args.command == "p1":
        bench_p1(args.faults)
    elif args.command == "p5":
        bench_p5(args.seconds, args.hcas, args.job_ranks, args.before)
    elif args.command == "exposition":
        bench_exposition(args.rounds)
    else:
        from agent_lab_bench import bench_lab  # bench/agent_lab_bench.py

        bench_lab(args.faults, args.api_nodes, args.api_seconds, args.heartbeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
