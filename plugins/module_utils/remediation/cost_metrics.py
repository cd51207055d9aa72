# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The audit log as Prometheus metrics: what the incidents cost, and how the remediations ended.

``python -m ...remediation.cost_metrics --audit-log PATH --listen 127.0.0.1:19095`` serves them on
``/metrics`` (the monitoring role runs it in the lab, and Prometheus scrapes it as the job
``gpufleet-remediation``). The log is read again on a scrape only when it has changed.

* ``gpufleet_incident_gpu_hours_lost_total{cause, plan}``: the GPU-hours each remediation's record
  says were lost (remediation/cost.py), summed;
* ``gpufleet_remediations_total{plan, result}``: the remediations recorded.

A remediation that failed and was resumed has a line per end: the last one counts, once. The
labels come from the records, which come from node conditions: a value that is not a plain name
(letters, digits, ``_``, ``-``, at most 64) is exported as ``other``, so no writer of a condition can
make up series at will.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.record import read_records

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def label(value: Any) -> str:
    text = str(value or "none")
    return text if _NAME.fullmatch(text) else "other"


def last_of_each(records: Iterable[Mapping[str, Any]]) -> List[Mapping[str, Any]]:
    """The last line of each remediation id, in the order of those lines."""
    latest: Dict[Any, Mapping[str, Any]] = {}
    for record in records:
        latest.pop(record.get("id"), None)
        latest[record.get("id")] = record
    return list(latest.values())


def totals(records: Iterable[Mapping[str, Any]]) -> Tuple[Dict[Tuple[str, str], float], Dict[Tuple[str, str], int]]:
    """(GPU-hours lost by (cause, plan), remediations by (plan, result))."""
    lost: Dict[Tuple[str, str], float] = {}
    ended: Dict[Tuple[str, str], int] = {}
    for record in last_of_each(records):
        plan = label((record.get("plan") or {}).get("name"))
        cause = label((record.get("fault") or {}).get("reason"))
        end = (plan, label(record.get("result")))
        ended[end] = ended.get(end, 0) + 1
        hours = (record.get("cost") or {}).get("gpu_hours_lost")
        if isinstance(hours, (int, float)) and hours >= 0:
            lost[(cause, plan)] = lost.get((cause, plan), 0.0) + float(hours)
    return lost, ended


class AuditLogCollector:
    """A prometheus-client collector over the audit log, read again only when it changed."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: Optional[Tuple[int, int, int]] = None
        self._totals: Tuple[Dict[Tuple[str, str], float], Dict[Tuple[str, str], int]] = ({}, {})
        self._skipped = 0
        self._lock = threading.Lock()

    def _read(self) -> None:
        try:
            info = os.stat(self.path)
            stamp: Optional[Tuple[int, int, int]] = (info.st_ino, info.st_size, info.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        if stamp == self._seen and self._seen is not None:
            return
        warnings: List[str] = []
        self._totals = totals(read_records(self.path, warnings=warnings))
        self._skipped = len(warnings)
        self._seen = stamp

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            self._read()
            lost, ended = self._totals
            skipped = self._skipped
        hours = CounterMetricFamily("gpufleet_incident_gpu_hours_lost",
                                    "GPU-hours lost to incidents, as each remediation's audit record counts them",
                                    labels=["cause", "plan"])
        for (cause, plan), value in sorted(lost.items()):
            hours.add_metric([cause, plan], value)
        yield hours
        done = CounterMetricFamily("gpufleet_remediations", "Remediations recorded in the audit log, by plan and end",
                                   labels=["plan", "result"])
        for (plan, result), count in sorted(ended.items()):
            done.add_metric([plan, result], count)
        yield done
        yield GaugeMetricFamily("gpufleet_remediation_audit_lines_skipped",
                                "Lines of the audit log that are not a JSON record (a torn write)", value=skipped)


def main(argv: Optional[List[str]] = None) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--audit-log", required=True, help="the remediations' JSON-lines audit log")
    parser.add_argument("--listen", default="127.0.0.1:19095", help="address:port to serve /metrics on")
    args = parser.parse_args(argv)
    host, _colon, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        parser.error("--listen: expected address:port, got %r" % args.listen)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AuditLogCollector(args.audit_log))
    start_http_server(int(port), addr=host.strip("[]"), registry=registry)
    sys.stdout.write("serving the metrics of %s on http://%s/metrics\n" % (args.audit_log, args.listen))
    sys.stdout.flush()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
