# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab half of bench/agent.py: figures that need the API server, Prometheus and Alertmanager.

Brings up its own lab (bench/lab.py's directory and 18xxx ports, so it runs beside `make lab`),
and takes it down at the end:

* fault -> condition: an XID 79 into gpu-a-001's fake NVML until the API server holds its
  GpuHealthy=False condition (seen through a watch on that Node);
* fault -> alert: the same fault until GpuNodeFatal for gpu-a-001 is active in Alertmanager's API
  (polled every 20 ms), through the agent, a 1 s scrape and a 1 s rule evaluation;
* API load: 1,000 kwok nodes, each with the agent's condition publisher (the same class, in
  threads of this process) offered its condition every second as the agent loop does; the writes
  the API server receives per minute in steady state, against the design limit of one per node
  per heartbeat.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import List

from agent import summary
from lab import BENCH_VARS
from lab_harness import Lab, lab_processes

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.kube_publisher import KubePublisher
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    expand_pools,
    node_as_dict,
    parse_pools,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.agent_client import agent_api
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import NodeCondition
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.node_layout import kwok_node_manifest

NODE = "gpu-a-001"
LAB_DIR = Path("/var/tmp/gpufleet-bench-agent-lab")


def gpu_healthy(lab: Lab) -> tuple:
    node = lab.kube().read_node(NODE)
    for condition in node.status.conditions or []:
        if condition.type == "GpuHealthy":
            return condition.status, condition.reason
    return None, None


def alert_active() -> bool:
    query = urllib.parse.urlencode({"filter": ['alertname="GpuNodeFatal"', 'node="%s"' % NODE], "active": "true"},
                                   doseq=True)
    url = "http://127.0.0.1:%d/api/v2/alerts?%s" % (BENCH_VARS["monitoring_alertmanager_port"], query)
    with urllib.request.urlopen(url, timeout=2) as answer:
        return bool(json.loads(answer.read()))


def wait(predicate, timeout: float, interval: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.time()
        time.sleep(interval)
    raise SystemExit("timed out waiting for %s" % predicate)


def agent_pid(lab: Lab) -> int:
    return int(json.loads((lab.run_dir / ("health-agent-%s.pid" % NODE)).read_text())["pid"])


def fault_latencies(lab: Lab, faults: int) -> None:
    state_dir = str(lab.lab_dir / "gpus" / NODE)
    to_condition: List[float] = []
    to_alert: List[float] = []
    for _number in range(faults):
        injected = time.time()
        fake_gpu_state.inject_xid(state_dir, 3, 79)
        to_condition.append(wait(lambda: gpu_healthy(lab) == ("False", "Xid79"), 10, 0.005) - injected)
        to_alert.append(wait(alert_active, 20, 0.02) - injected)
        # The GPU reset that remediation would do: clear the fake, make the agent forget the XID.
        fake_gpu_state.clear(state_dir)
        os.kill(agent_pid(lab), signal.SIGUSR1)
        wait(lambda: gpu_healthy(lab)[0] == "True", 10, 0.05)
        wait(lambda: not alert_active(), 30, 0.1)
    print("fault -> condition and alert (%d XID 79 faults, lab: 1 s scrape, 1 s evaluation, group_wait 0 s)"
          % faults)
    print("  " + summary("fault -> GpuHealthy on API server", to_condition))
    print("  " + summary("fault -> alert active (Alertmanager)", to_alert))


def api_load(lab: Lab, count: int, seconds: int, heartbeat: float) -> None:
    from kubernetes.client.exceptions import ApiException

    api = lab.kube()
    template = dict(BENCH_VARS["gpufleet_node_pools"][0], spares=0)
    pools = [dict(template, name="load%d" % n, count=min(500, count - start))
             for n, start in enumerate(range(0, count, 500))]
    names = []
    for node in expand_pools(parse_pools(pools)):
        names.append(node.name)
        try:
            api.create_node(kwok_node_manifest(node_as_dict(node)))
        except ApiException as exc:
            if exc.status != 409:
                raise
    writes = {"condition": 0, "event": 0}
    errors: List[str] = []
    lock = threading.Lock()

    def counted(kind: str) -> None:
        with lock:
            writes[kind] += 1

    healthy = NodeCondition("GpuHealthy", "True", "GpusHealthy", "8 GPUs healthy")
    # Each publisher has its own connection, as each agent does (the agent's own HTTPS client).
    kubeconfig = str(lab.kubeconfig)
    publishers = [KubePublisher(name, lambda: agent_api(kubeconfig), heartbeat=heartbeat, backoff_max=30.0,
                                on_write=counted, on_error=errors.append) for name in names]
    # Agents start at different times; here they start spread over one heartbeat.
    for publisher in publishers:
        publisher.start()
        publisher.offer(healthy)
        time.sleep(heartbeat / len(publishers))
    # Let every first write land, then measure the steady state.
    time.sleep(heartbeat)
    with lock:
        start_count, started = writes["condition"], time.monotonic()
        errors_before = len(errors)
    end = started + seconds
    while time.monotonic() < end:
        for publisher in publishers:
            publisher.offer(healthy)  # what each agent loop does every second
        time.sleep(1.0)
    with lock:
        steady = writes["condition"] - start_count
    elapsed = time.monotonic() - started
    for publisher in publishers:
        publisher.stop(timeout=0.1)
    per_minute = steady * 60.0 / elapsed
    per_node_per_heartbeat = steady / float(count) / (elapsed / heartbeat)
    figures = (count, heartbeat, elapsed, per_minute, per_node_per_heartbeat, len(errors) - errors_before,
               errors_before)
    print("API load: %d nodes, heartbeat %.0f s, %.0f s steady state: %.0f condition writes/min "
          "(%.2f per node per heartbeat; limit 1), %d failed writes (%d while starting)" % figures)
    for name in names:
        with contextlib.suppress(ApiException):
            api.delete_node(name)


def bench_lab(faults: int, api_nodes: int, api_seconds: int, heartbeat: float) -> None:
    # A retried write is a figure here (counted), not a log line per node.
    logging.getLogger("gpufleet").setLevel(logging.ERROR)
    lab = Lab(lab_dir=LAB_DIR, extra_vars=BENCH_VARS)
    if lab.lab_dir.exists():
        lab.playbook("lab-down.yml")
        shutil.rmtree(lab.lab_dir)
    try:
        began = time.monotonic()
        up = lab.playbook("one-click-slurm.yml")
        if up.rc != 0:
            raise SystemExit("the lab did not come up:\n" + up.output[-4000:])
        print("lab with agents and monitoring up in %.1f s" % (time.monotonic() - began))
        wait(lambda: gpu_healthy(lab)[0] == "True", 30, 0.2)
        fault_latencies(lab, faults)
        if api_nodes:
            api_load(lab, api_nodes, api_seconds, heartbeat)
    finally:
        lab.playbook("lab-down.yml")
        print("after lab-down: %d lab processes left" % len(lab_processes(lab.lab_dir)))
