"""Look at the lab's health agents the way an operator would: metrics, node condition, journal,
Kubernetes Events, Prometheus and Alertmanager; and inject faults the way drills will."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from lab_harness import REPO, TEST_LAB_VARS, Lab

FAKEGPU = REPO / "tools" / "fake-nvml" / "fakegpu"


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what or predicate, last))


def http_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


class AgentProbe:
    def __init__(self, lab: Lab, node: str) -> None:
        self.lab = lab
        self.node = node

    # -- where things are ------------------------------------------------------------------
    @property
    def gpu_dir(self) -> Path:
        return self.lab.lab_dir / "gpus" / self.node

    @property
    def kmsg(self) -> Path:
        return self.lab.lab_dir / "kmsg" / ("%s.log" % self.node)

    @property
    def journal(self) -> Path:
        return self.lab.lab_dir / "agent" / ("%s.events.jsonl" % self.node)

    @property
    def config(self) -> Path:
        return self.lab.lab_dir / "agent" / ("%s.yml" % self.node)

    @property
    def port(self) -> int:
        target = self.lab.lab_dir / "monitoring" / "targets" / ("agent-%s.json" % self.node)
        return int(json.loads(target.read_text())[0]["targets"][0].rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        record = self.lab.run_dir / ("health-agent-%s.pid" % self.node)
        return int(json.loads(record.read_text())["pid"])

    # -- faults ----------------------------------------------------------------------------
    def fakegpu(self, *args: str) -> Dict[str, Any]:
        done = subprocess.run([sys.executable, str(FAKEGPU), "--dir", str(self.gpu_dir), *args],
                              capture_output=True, text=True, check=True, timeout=30)
        return json.loads(done.stdout) if done.stdout.strip().startswith("{") else {}

    def gpu(self, index: int) -> Dict[str, Any]:
        return self.fakegpu("show")["gpus"][index]

    def kernel_line(self, text: str) -> None:
        with open(self.kmsg, "a") as handle:
            handle.write(text.rstrip("\n") + "\n")

    def reset(self) -> None:
        """All GPUs healthy and the agent's XID history forgotten (what a GPU reset does)."""
        self.fakegpu("clear")
        forgotten = self.count_journal("forgotten")
        os.kill(self.pid, signal.SIGUSR1)
        wait_for(lambda: self.count_journal("forgotten") > forgotten, 10, what="the agent's SIGUSR1 record")
        self.wait_condition(lambda c: c["status"] == "True", what="GpuHealthy True after the reset")

    def count_journal(self, event: str) -> int:
        return sum(1 for record in self.journal_records() if record.get("event") == event)

    # -- what the agent publishes ------------------------------------------------------------
    def metrics(self) -> str:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port, timeout=3) as answer:
            return answer.read().decode()

    def sample(self, name: str, **labels: str) -> Optional[float]:
        """The value of the first series of ``name`` whose labels include ``labels``."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.metrics()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return None

    def condition(self) -> Optional[Dict[str, Any]]:
        node = self.lab.kube().read_node(self.node)
        for condition in node.status.conditions or []:
            if condition.type == "GpuHealthy":
                return {"status": condition.status, "reason": condition.reason, "message": condition.message,
                        "heartbeat": condition.last_heartbeat_time, "transition": condition.last_transition_time}
        return None

    def wait_condition(self, check: Callable[[Dict[str, Any]], bool], timeout: float = 15.0, what: str = "") -> Dict:
        seen: List[Any] = [None]

        def matches() -> Optional[Dict[str, Any]]:
            seen[0] = self.condition()
            return seen[0] if seen[0] and check(seen[0]) else None

        try:
            return wait_for(matches, timeout, what=what or "the GpuHealthy condition of %s" % self.node)
        except AssertionError as exc:
            raise AssertionError("%s; the condition was %r" % (exc, seen[0])) from None

    def journal_records(self) -> List[Dict[str, Any]]:
        if not self.journal.exists():
            return []
        return [json.loads(line) for line in self.journal.read_text().splitlines() if line.strip()]

    def events(self, since: float = 0.0) -> List[Any]:
        """The agent's Events about this node, stamped at or after ``since`` (epoch seconds)."""
        listed = self.lab.kube().list_namespaced_event(
            "default", field_selector="involvedObject.kind=Node,involvedObject.name=%s" % self.node)
        return [item for item in listed.items if item.source and item.source.component == "gpufleet-agent"
                and item.last_timestamp is not None and item.last_timestamp.timestamp() >= int(since)]


def prometheus_url() -> str:
    return "http://127.0.0.1:%d" % TEST_LAB_VARS["monitoring_prometheus_port"]


def alertmanager_url() -> str:
    return "http://127.0.0.1:%d" % TEST_LAB_VARS["monitoring_alertmanager_port"]


def firing_alerts(alertname: str) -> List[Dict[str, Any]]:
    query = urllib.parse.urlencode({"filter": 'alertname="%s"' % alertname, "active": "true",
                                    "silenced": "false", "inhibited": "false"})
    return http_json("%s/api/v2/alerts?%s" % (alertmanager_url(), query))


def nodes_alerting(alertname: str) -> List[str]:
    return sorted({alert["labels"].get("node", "") for alert in firing_alerts(alertname)})


def prometheus_query(expr: str) -> Dict[str, Any]:
    return http_json("%s/api/v1/query?%s" % (prometheus_url(), urllib.parse.urlencode({"query": expr})))
