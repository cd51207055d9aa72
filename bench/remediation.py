#!/usr/bin/env python
"""Benchmark of the remediation loop (issue 8), in a lab of its own (8 GPU nodes, 2 spares).

Prints:
  * P2, detection -> quarantine, p50/p99 over --reps faults on different nodes, for each of --paths:
    first_responder (the default: the first responder fences and quarantines, the playbook that
    Alertmanager triggers does the rest), alertmanager and node_condition (the playbook alone, so
    triggered, the first responder off):
      - the agent's fast fence: the agent's fault record -> Slurm DRAIN (reason "... agent fast fence"),
        when the 50 ms poll sees it before the remediation's reason replaces it;
      - the remediation: the fault record -> Slurm DRAIN with the remediation's reason and ->
        Kubernetes cordon + taint (both observed by polling every 50 ms);
  * P3, quarantine throughput on --nodes kwok nodes: our quarantine (cordon + taint + annotation in
    one conflict-safe patch, --workers parallel clients) beside `kubectl cordon` of the same nodes
    (one kubectl process, sequential, the floor), with --draino BIN beside draino on the same nodes
    (GpuHealthy=False set on all of them, then draino started: nodes cordoned within
    --draino-seconds), and Slurm's DRAIN of the lab's whole host list in one `scontrol update`.
    draino (planetlabs/draino, Apache-2.0) is never part of this repository: build it elsewhere,
    for example into /tmp/draino-bin, with cordon on the given conditions and the drain skipped;
  * P4, injection -> job resumed, with 0 s simulated boot: train_sim runs on a node, XID 79 is
    injected, until the job runs again on another node and has printed its resume line; with the
    time of each phase from the audit record.
  * runs, the module runs of one RESTART_BM remediation (XID 79, a job on the node, replaced from a
    spare), counted by bench/callback_plugins/module_runs.py; with --before DIR, the same for the
    checkout in DIR (for example `git worktree add /tmp/before <ref>`), on the same lab.

Machines here are shared and have 2 cores: the figures are a run's, not a promise; the ratios
(ours vs kubectl) are measured side by side in the same run.
Run: .venv/bin/python bench/remediation.py [--reps 5] [--nodes 1000] [--workers 8] [--before DIR]
         [--draino /tmp/draino-bin] [--draino-seconds 120]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "bench"))

from lab import BENCH_VARS, scale_nodes
from lab_harness import Lab, lab_processes

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import core_v1
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.nodes import NodeWriter
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import (
    QuarantineSpec,
    quarantine_node,
)

LAB_DIR = Path("/var/tmp/gpufleet-bench-remediation-lab")
FAKEGPU = REPO / "tools" / "fake-nvml" / "fakegpu"
POLL = 0.05
# The P2 runs stop after the quarantine: no drain or replacement, so every rep starts from the same fleet.
P2_PLANS = {"RESTART_BM": ["fence", "quarantine", "notify", "jobs", "down", "opt_out", "record"]}


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100.0 * (len(ordered) - 1)))]


def summary(values):
    return "p50 %.2f s  p99 %.2f s  (min %.2f, max %.2f, n=%d)" % (
        statistics.median(values), percentile(values, 99), min(values), max(values), len(values))


class Bench:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.api = lab.kube()

    def slurm(self, *argv):
        return self.lab.slurm(*argv, check=False)

    def slurm_node(self, node):
        text = self.slurm("scontrol", "--oneliner", "show", "node", node)
        state = re.search(r"State=(\S+)", text)
        reason = text.split("Reason=", 1)[1] if "Reason=" in text else ""
        return (state.group(1) if state else ""), reason

    def fakegpu(self, node, *args):
        subprocess.run([sys.executable, str(FAKEGPU), "--dir", str(self.lab.lab_dir / "gpus" / node), *args],
                       check=True, capture_output=True, timeout=30)

    def journal_fault_time(self, node, since):
        path = self.lab.lab_dir / "agent" / ("%s.events.jsonl" % node)
        for line in path.read_text().splitlines() if path.exists() else []:
            record = json.loads(line)
            if record.get("event") == "fault" and record.get("time", 0) >= since:
                return record["time"]
        return None

    def agent_pid(self, node):
        return int(json.loads((self.lab.run_dir / ("health-agent-%s.pid" % node)).read_text())["pid"])

    def heal(self, node):
        self.fakegpu(node, "clear")
        os.kill(self.agent_pid(node), signal.SIGUSR1)
        writer = NodeWriter(self.api)
        quarantine_node(writer, node, "absent", QuarantineSpec())
        self.slurm("scontrol", "update", "NodeName=%s" % node, "State=RESUME")

    def wait(self, predicate, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(POLL)
        raise SystemExit("timed out waiting for %s" % what)

    def self_healing(self, **extra):
        result = self.lab.playbook("one-click-slurm.yml", "--tags", "self_healing", extra=extra)
        if result.rc != 0:
            raise SystemExit("self_healing role failed:\n" + result.output[-3000:])

    def reset_state(self):
        result = self.lab.playbook("remediation-reset.yml", extra={"clear_slots": True, "clear_history": True})
        if result.rc != 0:
            raise SystemExit("remediation-reset.yml failed:\n" + result.output[-3000:])

    # -- P2 ------------------------------------------------------------------------------------
    def p2(self, reps, path):
        """Fault -> Slurm DRAIN and -> cordon + taint. ``path``: ``first_responder`` (the default: the
        first responder fences, the Alertmanager-triggered playbook does the rest), or the playbook
        alone, triggered by ``alertmanager`` or ``node_condition`` (the first responder off)."""
        responder = path == "first_responder"
        source = "alertmanager" if responder else path
        self.self_healing(self_healing_enabled=True, self_healing_source=source,
                          self_healing_first_responder=responder,
                          self_healing_throttle_window="5 seconds", remediation_plans=P2_PLANS,
                          remediation_breaker={"max_percent": 100, "max_nodes": 100})
        nodes = ["gpu-a-%03d" % n for n in range(1, 9)]
        fence, drain, cordon = [], [], []
        for rep in range(reps):
            node = nodes[rep % len(nodes)]
            self.reset_state()
            seen = {}
            stop = threading.Event()

            def watch(node=node, seen=seen, stop=stop):  # pylint: disable=dangerous-default-value
                while not stop.is_set():
                    state, reason = self.slurm_node(node)
                    now = time.time()
                    if "fence" not in seen and "DRAIN" in state and "agent fast fence" in reason:
                        seen["fence"] = now
                    if "drain" not in seen and ("DRAIN" in state or state.startswith("DOWN")) \
                            and "remediation" in reason:
                        seen["drain"] = now
                    spec = self.api.read_node(node).spec
                    if "cordon" not in seen and spec.unschedulable and any(
                            t.key == "gpufleet.io/gpu-unhealthy" for t in spec.taints or []):
                        seen["cordon"] = now
                    time.sleep(POLL)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            injected = time.time()
            self.fakegpu(node, "xid", "--gpu", "1", "--xid", "79")
            detected = self.wait(lambda node=node, injected=injected: self.journal_fault_time(node, injected - 1),
                                 30, "the agent's fault record")
            # The agent's own drain lasts until the remediation's reason replaces it: with the first
            # responder, a fraction of a second, which the 50 ms poll may miss.
            self.wait(lambda seen=seen: {"drain", "cordon"} <= set(seen), 120, "DRAIN and cordon")
            stop.set()
            watcher.join(5)
            if "fence" in seen:
                fence.append(seen["fence"] - detected)
            drain.append(seen["drain"] - detected)
            cordon.append(seen["cordon"] - detected)
            print("  rep %d %s %s: detect %.2f s after injection; fast fence %s, remediation DRAIN +%.2f s, "
                  "cordon + taint +%.2f s" % (rep + 1, path, node, detected - injected,
                                              "+%.2f s" % (seen["fence"] - detected) if "fence" in seen else "unseen",
                                              drain[-1], cordon[-1]), flush=True)
            # Let the remediation finish before the node is healed (its record phase).
            self.wait(lambda node=node, injected=injected: self.finished_since(node, injected), 120,
                      "the remediation's audit record")
            self.heal(node)
        print("P2 %-15s agent fast fence (fault -> Slurm DRAIN):   %s" % (path, summary(fence)))
        print("P2 %-15s remediation (fault -> Slurm DRAIN, ours):  %s" % (path, summary(drain)))
        print("P2 %-15s remediation (fault -> cordon + taint):     %s" % (path, summary(cordon)))
        self.self_healing(self_healing_enabled=False)

    def finished_since(self, node, since):
        audit = self.lab.lab_dir / "remediation" / "audit.jsonl"
        lines = audit.read_text().splitlines() if audit.exists() else []
        return any(record["node"] == node and record["started_at"] >= since - 1
                   for record in map(json.loads, lines))

    # -- module runs ---------------------------------------------------------------------------
    def runs(self, tree, node):
        """Module runs of one RESTART_BM remediation of ``node`` by the playbook of checkout ``tree``."""
        counted = self.lab.lab_dir / "module-runs.json"
        workdir = self.lab.lab_dir / "bench-runs-job"
        workdir.mkdir(parents=True, exist_ok=True)
        job = self.lab.slurm("sbatch", "--parsable", "--requeue", "-w", node, "--gres=gpu:1",
                             "--output=%s" % (workdir / "train.out"), str(self.lab.lab_dir / "bin" / "train_sim"),
                             "--checkpoint-dir", str(workdir / "ckpt"), "--steps", "100000",
                             "--step-seconds", "0.05").strip()
        self.wait(lambda: "RUNNING" in self.slurm("squeue", "-h", "-j", job, "-o", "%T"), 60, "the job running")
        self.fakegpu(node, "xid", "--gpu", "1", "--xid", "79")
        self.wait(lambda: any(c.type == "GpuHealthy" and c.status == "False"
                              for c in self.api.read_node(node).status.conditions or []), 30, "GpuHealthy False")
        env = dict(self.lab.env(), ANSIBLE_COLLECTIONS_PATH=str(tree / "collections"),
                   ANSIBLE_CALLBACK_PLUGINS=str(REPO / "bench" / "callback_plugins"),
                   ANSIBLE_CALLBACKS_ENABLED="module_runs", GPUFLEET_MODULE_RUNS_FILE=str(counted))
        variables = dict(self.lab.extra_vars, gpufleet_lab_dir=str(self.lab.lab_dir), remediation_node=node,
                         remediation_grace=30, remediation_boot_delay=0)
        started = time.time()
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), str(tree / "playbooks" / "remediate-node.yml"),
             "-e", json.dumps(variables)], cwd=tree, env=env, capture_output=True, text=True, timeout=900,
            check=False)
        took = time.time() - started
        self.slurm("scancel", job)
        if done.returncode != 0:
            raise SystemExit("remediate-node.yml of %s failed:\n%s" % (tree, (done.stdout + done.stderr)[-3000:]))
        found = json.loads(counted.read_text())
        restored = subprocess.run(
            [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "gpufleet.resilience.node_replace", "-a",
             json.dumps({"name": node, "provider": "lab", "state": "restored", "lab_dir": str(self.lab.lab_dir),
                         "kubeconfig": str(self.lab.kubeconfig), "slurm_conf": str(self.lab.slurm_conf)})],
            cwd=REPO, env=self.lab.env(), capture_output=True, text=True, timeout=600, check=False)
        if restored.returncode != 0:
            raise SystemExit("restoring %s failed:\n%s" % (node, restored.stdout[-2000:]))
        self.heal(node)
        return found, took

    def module_runs(self, before):
        self.reset_state()
        trees = [("this checkout", REPO)] + ([("--before", before)] if before else [])
        for label, tree in trees:
            found, took = self.runs(tree, "gpu-a-003")
            print("runs %-14s %d module runs for one RESTART_BM remediation (with a job), %.1f s: %s" % (
                label, found["runs"], took, ", ".join("%s %d" % (name.split(".")[-1], count)
                                                      for name, count in sorted(found["modules"].items()))),
                  flush=True)
            self.reset_state()

    # -- P3 ------------------------------------------------------------------------------------
    def p3(self, count, workers, draino=None, draino_seconds=120):
        scale_nodes(self.lab, count)
        names = sorted(n.metadata.name for n in self.api.list_node(label_selector="gpufleet.io/pool").items
                       if n.metadata.name.startswith("scale"))
        apis = [core_v1(str(self.lab.kubeconfig)) for _index in range(workers)]
        spec = QuarantineSpec(reason="bench", remediation_id="bench")

        def ours(state):
            def one(index_name):
                index, name = index_name
                return quarantine_node(NodeWriter(apis[index % workers]), name, state, spec)["changed"]

            began = time.monotonic()
            with ThreadPoolExecutor(workers) as pool:
                changed = sum(pool.map(one, enumerate(names)))
            return changed, time.monotonic() - began

        changed, took = ours("present")
        print("P3 our quarantine (cordon + taint + annotation), %d workers: %d nodes in %.1f s = %.0f nodes/s"
              % (workers, changed, took, changed / took))
        ours("absent")
        kubectl = Path(os.environ.get("GPUFLEET_CACHE_DIR") or Path.home() / ".cache" / "gpufleet") / "bin" / "kubectl"
        if kubectl.exists():
            began = time.monotonic()
            subprocess.run([str(kubectl), "--kubeconfig", str(self.lab.kubeconfig), "cordon", *names],
                           check=True, capture_output=True, timeout=1800)
            took_kubectl = time.monotonic() - began
            # kubectl's client-side rate limit (5 requests/s, burst 10) sets its pace: that is the floor.
            print("P3 kubectl cordon (one process, cordon only, its default QPS): %d nodes in %.1f s = %.1f nodes/s"
                  " (ours/kubectl: %.1fx)" % (len(names), took_kubectl, len(names) / took_kubectl,
                                              (changed / took) / (len(names) / took_kubectl)))
        else:
            print("P3 kubectl not found at %s: no side-by-side floor" % kubectl)
        hostlist = "gpu-a-[001-008]"
        began = time.monotonic()
        self.lab.slurm("scontrol", "update", "NodeName=%s" % hostlist, "State=DRAIN", "Reason=gpufleet: bench")
        took_slurm = time.monotonic() - began
        self.lab.slurm("scontrol", "update", "NodeName=%s" % hostlist, "State=RESUME")
        print("P3 Slurm: DRAIN of %s (8 nodes, the lab's size) in one scontrol update: %.3f s" % (hostlist, took_slurm))
        if draino is not None:
            self.p3_draino(draino, names, workers, changed / took, draino_seconds)
        for name in names:
            self.api.delete_node(name)

    def p3_draino(self, draino, names, workers, ours_rate, seconds):
        """draino on the same nodes: uncordoned, GpuHealthy=False on each, then draino started; the
        nodes it has cordoned are counted once a second for ``seconds``."""
        apis = [core_v1(str(self.lab.kubeconfig)) for _index in range(workers)]
        condition = {"type": "GpuHealthy", "status": "False", "reason": "GpuFatal", "message": "bench",
                     "lastHeartbeatTime": None, "lastTransitionTime": None}

        def prepare(index_name):
            index, name = index_name
            api = apis[index % workers]
            api.patch_node(name, {"spec": {"unschedulable": None}})
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            api.patch_node_status(name, {"status": {"conditions": [
                dict(condition, lastHeartbeatTime=stamp, lastTransitionTime=stamp)]}})

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(prepare, enumerate(names)))
        pools = sorted({n.metadata.labels["gpufleet.io/pool"] for n in self.api.list_node().items
                        if n.metadata.name in set(names)})
        expression = 'metadata.labels["gpufleet.io/pool"] in [%s]' % ", ".join('"%s"' % p for p in pools)
        log = open(self.lab.lab_dir / "draino.log", "wb")  # noqa: SIM115 - closed below
        began = time.monotonic()
        # draino reads each condition as TYPE=STATUS,DURATION (its parser indexes the duration).
        process = subprocess.Popen([str(draino), "--kubeconfig", str(self.lab.kubeconfig), "--node-label-expr",
                                    expression, "GpuHealthy=False,0s"], stdout=log, stderr=subprocess.STDOUT)
        wanted = set(names)
        cordoned, took = 0, 0.0
        try:
            while time.monotonic() - began < seconds:
                time.sleep(1.0)
                cordoned = sum(1 for n in self.api.list_node(label_selector="gpufleet.io/pool").items
                               if n.metadata.name in wanted and n.spec.unschedulable)
                took = time.monotonic() - began
                if cordoned == len(names) or process.poll() is not None:
                    break
        finally:
            process.terminate()
            process.wait(10)
            log.close()
        rate = cordoned / took if took else 0.0
        print("P3 draino (cordon only, its own client-go defaults): %d of %d nodes cordoned %.1f s after it started "
              "= %.1f nodes/s (ours/draino: %.0fx)%s"
              % (cordoned, len(names), took, rate, ours_rate / rate if rate else float("inf"),
                 "" if process.returncode in (None, 0, -15) else "; draino exited %s, see %s"
                 % (process.returncode, self.lab.lab_dir / "draino.log")))

    # -- P4 ------------------------------------------------------------------------------------
    def p4(self, workdir):
        self.reset_state()
        self.self_healing(self_healing_enabled=True, remediation_boot_delay=0, remediation_plans={})
        workdir.mkdir(parents=True, exist_ok=True)
        out = workdir / "train.out"
        job = self.lab.slurm("sbatch", "--parsable", "--requeue", "--open-mode=append", "--gres=gpu:1",
                             "--output=%s" % out, str(self.lab.lab_dir / "bin" / "train_sim"), "--checkpoint-dir",
                             str(workdir / "ckpt"), "--steps", "100000", "--checkpoint-every", "50",
                             "--step-seconds", "0.02").strip()

        def host():
            text = self.slurm("scontrol", "show", "job", "--oneliner", job)
            found = re.search(r"JobState=RUNNING .*BatchHost=(\S+)", text)
            return found.group(1) if found and out.exists() and "step=" in out.read_text() else None

        node = self.wait(host, 60, "train_sim running")
        injected = time.time()
        self.fakegpu(node, "xid", "--gpu", "0", "--xid", "79")
        self.wait(lambda: "resume " in out.read_text() and host() not in (None, node), 300, "the job resumed elsewhere")
        resumed = time.time()
        self.slurm("scancel", job)
        audit = self.lab.lab_dir / "remediation" / "audit.jsonl"

        def records():
            lines = audit.read_text().splitlines() if audit.exists() else []
            found = [json.loads(line) for line in lines]
            return [r for r in found if r["node"] == node and r["started_at"] >= injected - 1]

        record = self.wait(records, 300, "the audit record of this remediation")[-1]
        print("P4 injection -> job resumed on another node: %.1f s (0 s boot delay)" % (resumed - injected))
        print("P4 injection -> remediation started %.1f s; phases: %s; whole remediation %.1f s" % (
            record["started_at"] - injected,
            ", ".join("%s %.1f s" % (s["phase"], s["duration_s"]) for s in record["timeline"]),
            record["duration_s"]))
        self.self_healing(self_healing_enabled=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: p2,p3,p4,runs")
    parser.add_argument("--before", type=Path, help="a checkout to count the module runs of too (runs)")
    parser.add_argument("--draino", type=Path, help="a draino binary to run beside ours in P3 (built outside the repo)")
    parser.add_argument("--draino-seconds", type=float, default=120.0, help="how long P3 gives draino")
    parser.add_argument("--paths", default="first_responder,alertmanager,node_condition",
                        help="the P2 paths, comma-separated: first_responder (the default path), or the playbook "
                             "alone triggered by alertmanager or node_condition")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    variables = dict(BENCH_VARS, health_agent_fast_fence=True, self_healing_enabled=False)
    lab = Lab(lab_dir=LAB_DIR, extra_vars=variables)
    if LAB_DIR.exists():
        lab.playbook("lab-down.yml")
        shutil.rmtree(LAB_DIR)
    up = lab.playbook("one-click-slurm.yml")
    if up.rc != 0:
        lab.playbook("lab-down.yml")
        raise SystemExit("the bench lab did not come up:\n" + up.output[-4000:])
    bench = Bench(lab)
    try:
        if "runs" not in skip:
            bench.module_runs(args.before)
        if "p2" not in skip:
            for path in args.paths.split(","):
                bench.p2(args.reps, path)
        if "p4" not in skip:
            bench.p4(LAB_DIR / "bench-job")
        if "p3" not in skip:
            bench.p3(args.nodes, args.workers, args.draino, args.draino_seconds)
    finally:
        lab.playbook("lab-down.yml")
        left = lab_processes(LAB_DIR)
        if left:
            print("processes left after lab-down: %s" % left)


if __name__ == "__main__":
    main()
