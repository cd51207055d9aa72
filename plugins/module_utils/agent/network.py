# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's watch of its node's InfiniBand and RoCE ports: what the loop reads each snapshot
tick, and what it publishes from it (docs/agent.md, "Network health").

* the ``InfiniBandHealthy`` node condition, apart from ``GpuHealthy``: the remediation acts on the
  GPUs' condition only, and a bad link is not a reason to reset a GPU. ``True`` when every port is
  up and quiet; ``False`` with the worst finding's reason (``IbPortDown``, ``IbLinkFlapping``, ...)
  otherwise. Its message names each finding and when it began, never a running figure ("down for
  12 s"), so an unhealthy node's condition is written when it changes and per heartbeat, not every
  second. A node where no port was ever seen (no HCA) has no such condition;
* a journal record and a Kubernetes Event when a finding appears (``fault``) and when it clears
  (``cleared``), with the finding's detail;
* the metrics (``health.infiniband.port_metrics`` and the node's IB verdict, one-hot).

The sticky and recovery windows are the judge's (``health.infiniband.IbWatch``): a single flap is
neither down nor flapping, and a finding clears only after the port was up and quiet for
``recover_after_s``. Pure apart from reading sysfs; the clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import (
    IbFinding,
    IbPort,
    IbThresholds,
    IbWatch,
    finding_sort_key,
    ib_verdict,
    read_ports,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import NodeCondition, rfc3339

CONDITION_TYPE = "InfiniBandHealthy"
HEALTHY_REASON = "IbPortsHealthy"
# The condition's reason (and the journal's, and the Event's) by the finding's kind.
REASONS = {"missing": "IbPortMissing", "down": "IbPortDown", "flapping": "IbLinkFlapping",
           "errors_rising": "IbErrorsRising", "unreadable": "IbPortUnreadable"}
SOURCE = "sysfs"
# A port is read in full (its rate, link layer and 7 counters: 11 files) at most this often while
# every port is up and nothing is found; in between only its two state files are read, and a state
# that changed reads the port in full at once. The counters' rates are judged per minute over 5
# minutes, and a flap too short for the state files to show is in link_downed at the next full
# reading. While a port is down or a finding active, every reading is full. 8 HCAs: 88 files a second
# before, about 25 now (docs/benchmarks.md, P5).
FULL_EVERY_S = 10.0


@dataclass
class NetworkView:
    """What a scrape shows of the node's ports (copied under the agent's lock)."""

    ports: List[IbPort] = field(default_factory=list)
    verdict: str = "healthy"


def _key(finding: IbFinding) -> Tuple[str, int, str]:
    return (finding.hca, finding.port, finding.kind)


class NetworkWatch:
    """One per agent; ``tick`` reads and judges, ``condition`` and ``view`` say the result."""

    def __init__(self, node: str, sysfs_root: str, thresholds: IbThresholds) -> None:
        self.node = node
        self.sysfs_root = sysfs_root
        self.watch = IbWatch(thresholds)
        self.findings: List[IbFinding] = []
        self.seen_ports = False
        self.view = NetworkView()
        self._full_at: Optional[float] = None

    def reconfigure(self, thresholds: IbThresholds) -> None:
        """New thresholds (SIGHUP); the ports' history is kept."""
        self.watch.reconfigure(thresholds)

    def tick(self, now: float) -> List[Dict[str, Any]]:
        """Read the ports (in full or light, ``FULL_EVERY_S``) and judge them; the journal records of
        the findings that began or ended.

        A ``class/infiniband`` that exists but cannot be listed raises ``HealthError``: the loop
        counts it as an error and keeps the last judgement."""
        full = (self._full_at is None or not 0 <= now - self._full_at < FULL_EVERY_S or bool(self.findings)
                or any(not port.up or port.error for port in self.view.ports))
        # The last reading (the view's ports) is what a light reading carries.
        ports = read_ports(self.sysfs_root, None if full else {port.name: port for port in self.view.ports})
        if full:
            self._full_at = now
        self.seen_ports = self.seen_ports or bool(ports)
        findings = self.watch.observe(ports, now)
        verdict, _reason = ib_verdict(findings)
        before = {_key(finding): finding for finding in self.findings}
        after = {_key(finding): finding for finding in findings}
        records = [self._record("fault", now, finding, verdict) for key, finding in after.items() if key not in before]
        records += [self._record("cleared", now, finding, verdict) for key, finding in before.items()
                    if key not in after]
        self.findings = findings
        self.view = NetworkView(ports=ports, verdict=verdict)
        return records

    def condition(self) -> Optional[NodeCondition]:
        """``InfiniBandHealthy``, or None on a node where no port was ever seen."""
        if not self.seen_ports:
            return None
        if not self.findings:
            return NodeCondition(CONDITION_TYPE, "True", HEALTHY_REASON,
                                 "healthy: all %d InfiniBand/RoCE port(s) up" % len(self.view.ports))
        ordered = sorted(self.findings, key=finding_sort_key)
        parts = ["%s/%d %s since %s" % (finding.hca, finding.port, finding.kind.replace("_", " "),
                                        rfc3339(finding.since)) for finding in ordered]
        return NodeCondition(CONDITION_TYPE, "False", REASONS[ordered[0].kind],
                             "%s: %s" % (self.view.verdict, "; ".join(parts)))

    def _record(self, event: str, now: float, finding: IbFinding, verdict: str) -> Dict[str, Any]:
        return {"time": now, "node": self.node, "event": event, "reason": REASONS[finding.kind],
                "verdict": verdict, "source": SOURCE,
                "fault": {"hca": finding.hca, "port": finding.port, "kind": finding.kind,
                          "severity": finding.severity, "since": finding.since, "summary": finding.detail}}
