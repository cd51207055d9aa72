# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's Prometheus metrics (docs/agent.md lists them), built at scrape time.

A custom collector reads one consistent ``MetricsView`` per scrape instead of updating a gauge
per field per snapshot: the loop does no metrics work between scrapes, and NVML's own counters
(ECC, NVLink) are exposed as counters with NVML's values, which ``Counter.inc`` cannot express.

Names follow the Prometheus conventions: base units, ``_total`` on counters, and no node name
in any metric name (the scrape adds a ``node`` label to the target).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Tuple

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import CollectorRegistry
except ImportError:  # pragma: no cover - the agent's hosts install it; modules never import this file
    CounterMetricFamily = GaugeMetricFamily = CollectorRegistry = None

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    STATES,
    THROTTLE_REASONS,
    GpuSnapshot,
)

ERROR_SOURCES = ("nvml", "kernel_log", "kubernetes", "slurm", "journal", "config")
XID_SOURCES = ("nvml", "kernel_log")
NVLINK_KINDS = (("crc_flit_errors", "crc_flit"), ("crc_data_errors", "crc_data"), ("replay_errors", "replay"),
                ("recovery_errors", "recovery"))


@dataclass
class MetricsView:
    """Everything a scrape shows, copied under the agent's lock."""

    node: str
    version: str
    driver_version: str
    kernel_log_source: str
    up: bool
    loop_lag: float = 0.0
    snapshot_duration: float = 0.0
    last_snapshot: float = 0.0
    errors: Dict[str, int] = field(default_factory=dict)
    xid_events: Dict[str, int] = field(default_factory=dict)
    verdict: str = "healthy"
    gpu_states: Dict[int, str] = field(default_factory=dict)
    uuids: Dict[int, str] = field(default_factory=dict)
    xid_counts: Dict[Tuple[int, str, int, str], int] = field(default_factory=dict)
    snapshots: List[GpuSnapshot] = field(default_factory=list)


def _gauge(name: str, documentation: str, labels: Tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


def _counter(name: str, documentation: str, labels: Tuple[str, ...]) -> CounterMetricFamily:
    # prometheus-client appends "_total" to a counter family's name itself.
    return CounterMetricFamily(name[:-len("_total")], documentation, labels=list(labels))


def families(view: MetricsView) -> Iterator:
    info = _gauge("gpufleet_agent_info", "The agent: its node, version, driver and kernel-log source",
                  ("node", "version", "driver_version", "kernel_log_source"))
    info.add_metric([view.node, view.version, view.driver_version, view.kernel_log_source], 1)
    yield info
    yield GaugeMetricFamily("gpufleet_agent_up", "1 while the agent senses its GPUs", value=1 if view.up else 0)
    yield GaugeMetricFamily("gpufleet_agent_loop_lag_seconds",
                            "How late the last snapshot started after its scheduled time", value=view.loop_lag)
    yield GaugeMetricFamily("gpufleet_agent_snapshot_duration_seconds", "How long the last NVML snapshot took",
                            value=view.snapshot_duration)
    yield GaugeMetricFamily("gpufleet_agent_last_snapshot_timestamp_seconds",
                            "Wall-clock time of the last NVML snapshot", value=view.last_snapshot)
    errors = _counter("gpufleet_agent_errors_total", "Errors of the agent, by source", ("source",))
    for source in ERROR_SOURCES:
        errors.add_metric([source], view.errors.get(source, 0))
    yield errors
    events = _counter("gpufleet_agent_xid_events_total", "Raw XID events read, by source", ("source",))
    for source in XID_SOURCES:
        events.add_metric([source], view.xid_events.get(source, 0))
    yield events

    verdict = _gauge("gpufleet_node_health_verdict", "The node's verdict (one-hot)", ("state",))
    for state in STATES:
        verdict.add_metric([state], 1 if view.verdict == state else 0)
    yield verdict
    gpu_health = _gauge("gpufleet_gpu_health", "Each GPU's verdict (one-hot)", ("gpu", "uuid", "state"))
    for index, current in sorted(view.gpu_states.items()):
        for state in STATES:
            gpu_health.add_metric([str(index), view.uuids.get(index, ""), state], 1 if current == state else 0)
    yield gpu_health
    xids = _counter("gpufleet_gpu_xid_errors_total", "XID errors by GPU, code and catalog action",
                    ("gpu", "uuid", "xid", "action"))
    for (index, uuid, xid, action), count in sorted(view.xid_counts.items()):
        xids.add_metric(["" if index < 0 else str(index), uuid, str(xid), action], count)
    yield xids
    yield from _snapshot_families(view.snapshots, view.uuids)


def _snapshot_families(snapshots: List[GpuSnapshot], uuids: Dict[int, str]) -> Iterator:
    ids = ("gpu", "uuid")
    lost = _gauge("gpufleet_gpu_lost", "1 when the GPU has fallen off the bus", ids)
    temperature = _gauge("gpufleet_gpu_temperature_celsius", "GPU core temperature", ids)
    power = _gauge("gpufleet_gpu_power_watts", "GPU power draw", ids)
    ecc = _counter("gpufleet_gpu_ecc_errors_total", "ECC errors as NVML counts them", (*ids, "type", "counter"))
    retired = _gauge("gpufleet_gpu_retired_pages_pending", "1 when retired pages wait for a GPU reset", ids)
    remapped = _gauge("gpufleet_gpu_remapped_rows", "Row remapping: rows remapped, and pending/failed flags",
                      (*ids, "kind"))
    nvlink_errors = _counter("gpufleet_gpu_nvlink_errors_total", "NVLink error counters",
                             (*ids, "link", "kind"))
    nvlink_active = _gauge("gpufleet_gpu_nvlink_active", "1 when the NVLink is up", (*ids, "link"))
    throttle = _gauge("gpufleet_gpu_throttle_reasons", "1 for each active clock-event (throttle) reason",
                      (*ids, "reason"))
    for snap in snapshots:
        labels = [str(snap.index), snap.uuid or uuids.get(snap.index, "")]
        lost.add_metric(labels, 1 if snap.lost else 0)
        if snap.lost:
            continue
        _maybe(temperature, labels, snap.temperature_c)
        _maybe(power, labels, snap.power_w)
        for kind, counter, value in (("correctable", "volatile", snap.ecc_sbe_volatile),
                                     ("uncorrectable", "volatile", snap.ecc_dbe_volatile),
                                     ("correctable", "aggregate", snap.ecc_sbe_aggregate),
                                     ("uncorrectable", "aggregate", snap.ecc_dbe_aggregate)):
            _maybe(ecc, [*labels, kind, counter], value)
        _maybe(retired, labels, snap.retired_pages_pending)
        for kind, value in (("correctable", snap.remapped_rows_correctable),
                            ("uncorrectable", snap.remapped_rows_uncorrectable),
                            ("pending", snap.remapped_rows_pending), ("failed", snap.remapped_rows_failed)):
            _maybe(remapped, [*labels, kind], value)
        for link in snap.nvlinks:
            _maybe(nvlink_active, [*labels, str(link.link)], link.active)
            for attribute, kind in NVLINK_KINDS:
                _maybe(nvlink_errors, [*labels, str(link.link), kind], getattr(link, attribute))
        if snap.throttle_reasons is not None:
            for bit, reason in THROTTLE_REASONS:
                throttle.add_metric([*labels, reason], 1 if snap.throttle_reasons & bit else 0)
    yield from (lost, temperature, power, ecc, retired, remapped, nvlink_errors, nvlink_active, throttle)


def _maybe(family, labels: List[str], value) -> None:
    """A series only for the fields this GPU has: NOT_SUPPORTED stays absent, never 0."""
    if value is None:
        return
    family.add_metric(labels, float(value))


class AgentCollector:
    def __init__(self, view: Callable[[], MetricsView]) -> None:
        self.view = view

    def collect(self) -> Iterator:
        yield from families(self.view())


def registry_for(view: Callable[[], MetricsView]) -> "CollectorRegistry":
    if CollectorRegistry is None:
        raise RuntimeError("the agent needs the Python package prometheus-client (pip install prometheus-client)")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(view))
    return registry


def render(view: MetricsView) -> str:
    """The exposition text of one view (tests and ``--once``)."""
    from prometheus_client import generate_latest

    return generate_latest(registry_for(lambda: view)).decode("utf-8")
