# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Where each part of an evidence bundle (``evidence.py``) comes from: the Slurm and Kubernetes
clients (made only when their part is collected), and the health agent's own files and metrics
page, found through its configuration file on this host."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, Optional

from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.resilience.plugins.module_utils.files import read_tail
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import EVENT_NAMESPACE
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import evidence

AGENT_TIMEOUT = 5.0


def _agent_config(path: Optional[str]) -> Dict[str, Any]:
    if not path:
        raise FileNotFoundError("no agent_config given: the agent's journal, kernel log and metrics are not read")
    import yaml  # Ansible's own dependency; here, so the pure collector never needs it

    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    if not isinstance(config, dict):
        raise ValueError("%s is not an agent configuration (a YAML mapping)" % path)
    return config


def _file(config: Callable[[], Dict[str, Any]], key: Callable[[Dict[str, Any]], Any], what: str,
          limit: int = 4 * 1024 * 1024) -> Callable[[], bytes]:
    def read() -> bytes:
        path = key(config())
        if not path:
            raise FileNotFoundError("the agent's configuration names no %s" % what)
        return read_tail(str(path), limit)
    return read


def sources(node: str, slurm: Callable[[], Any], kube: Callable[[], Any], agent_config: Optional[str],
            bug_report: bool, dest: str, metrics_url: Optional[str] = None) -> Dict[str, Callable[[], bytes]]:
    """Part name -> source, in the manifest's order. ``metrics_url``: the agent's metrics page, when
    it is not found through the agent's configuration (a controller that is not the node)."""
    config: Dict[str, Any] = {}

    def agent() -> Dict[str, Any]:
        if not config:
            config.update(_agent_config(agent_config))
        return config

    def slurm_part() -> bytes:
        client = slurm()
        record = client.nodes([node])[node]
        return evidence.as_json({"node": record.as_dict(), "jobs": [job.as_dict() for job in record.jobs]})

    def kube_part() -> bytes:
        api = kube()
        found = api.read_node(node)
        # The Events about a node are in default, where the remediation's own go too.
        events = api.list_namespaced_event(EVENT_NAMESPACE, field_selector="involvedObject.name=%s" % node)
        sanitize = api.api_client.sanitize_for_serialization
        return evidence.as_json({"node": sanitize(found), "events": sanitize(events).get("items", [])})

    def metrics_part() -> bytes:
        url = metrics_url
        if not url:
            metrics = agent().get("metrics") or {}
            if not metrics.get("port"):
                raise ValueError("the agent's configuration has no metrics port")
            url = "http://%s:%d/metrics" % (metrics.get("address") or "127.0.0.1", int(metrics["port"]))
        return open_url(url, timeout=AGENT_TIMEOUT, validate_certs=False).read()

    def bug_report_part() -> bytes:
        if not bug_report:
            raise RuntimeError("bug_report is false")
        with tempfile.TemporaryDirectory(dir=dest if os.path.isdir(dest) else None) as scratch:
            return evidence.bug_report(scratch)

    return {
        "slurm.json": slurm_part,
        "kubernetes.json": kube_part,
        "agent-metrics.txt": metrics_part,
        "agent-journal.jsonl": _file(agent, lambda c: c.get("journal"), "journal"),
        "kernel.log": _file(agent, lambda c: (c.get("kernel_log") or {}).get("path"), "kernel log file"),
        "nvidia-bug-report.log.gz": bug_report_part,
    }
