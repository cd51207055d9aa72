# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's Prometheus metrics (docs/agent.md lists them), built at scrape time.

A custom collector reads one consistent ``MetricsView`` per scrape instead of updating a gauge
per field per snapshot: the loop does no metrics work between scrapes, and NVML's own counters
(ECC, NVLink) are exposed as counters with NVML's values, which ``Counter.inc`` cannot express.

The NVLink families are three quarters of a scrape (18 links x 5 series per GPU) and change only
when a link's state or counters do (the counters are read every tenth snapshot): ``Exposition``
keeps their text and renders it again only then. Everything else is rendered per scrape, in the
text format, by ``text_format`` (prometheus-client did it before; its import cost the agent 1.8 MiB,
and the tests still read the text with its parser). Measured with 8 GPUs: 10 ms a scrape in the text
format, 17 ms in OpenMetrics (which Prometheus asks for first) plus 3 ms of gzip -9, against about
3 ms for the same text with the NVLink cache.

Names follow the Prometheus conventions: base units, ``_total`` on counters, and no node name
in any metric name (the scrape adds a ``node`` label to the target).
"""

from __future__ import annotations

import os
import selectors
import socketserver
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.jobs import JobsView
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.network import NetworkView
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.text_format import (
    COUNTER,
    Family,
    single,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.text_format import (
    render as render_families,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import port_metrics
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    STATES,
    THROTTLE_REASONS,
    GpuSnapshot,
)

ERROR_SOURCES = ("nvml", "kernel_log", "kubernetes", "slurm", "journal", "config", "infiniband")
XID_SOURCES = ("nvml", "kernel_log")
# The text format 0.0.4 (prometheus-client's CONTENT_TYPE_LATEST now names 1.0.0, which the
# Prometheus of Debian bookworm, 2.42, does not know).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
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
    network: Optional[NetworkView] = None  # None: the IB watch is off
    jobs: Optional[JobsView] = None  # None: the jobs' watch is off


def _gauge(name: str, documentation: str, labels: Tuple[str, ...] = ()) -> Family:
    return Family(name, documentation, labels=labels)


def _counter(name: str, documentation: str, labels: Tuple[str, ...]) -> Family:
    return Family(name, documentation, COUNTER, labels)


def families(view: MetricsView) -> Iterator:
    info = _gauge("gpufleet_agent_info", "The agent: its node, version, driver and kernel-log source",
                  ("node", "version", "driver_version", "kernel_log_source"))
    info.add_metric([view.node, view.version, view.driver_version, view.kernel_log_source], 1)
    yield info
    yield single("gpufleet_agent_up", "1 while the agent senses its GPUs", 1 if view.up else 0)
    yield single("gpufleet_agent_loop_lag_seconds", "How late the last snapshot started after its scheduled time",
                 view.loop_lag)
    yield single("gpufleet_agent_snapshot_duration_seconds", "How long the last NVML snapshot took",
                 view.snapshot_duration)
    yield single("gpufleet_agent_last_snapshot_timestamp_seconds", "Wall-clock time of the last NVML snapshot",
                 view.last_snapshot)
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
    # The network's families: Exposition adds them from its cache.
    if view.jobs is not None:
        yield from _job_families(view.jobs)


# What health.infiniband.port_metrics names, with their help texts.
_IB_HELP = {
    "gpufleet_ib_port_up": "1 when the port is ACTIVE and its physical link LinkUp",
    "gpufleet_ib_port_state": "The port's logical state code (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE)",
    "gpufleet_ib_port_phys_state": "The port's physical state code (2 Polling, 3 Disabled, 5 LinkUp, ...)",
    "gpufleet_ib_port_rate_gbps": "The port's signalling rate in Gb/s, as sysfs gives it",
}


def _network_families(network: NetworkView) -> Iterator:
    verdict = _gauge("gpufleet_ib_node_verdict", "The node's InfiniBand/RoCE verdict (one-hot)", ("state",))
    for state in STATES:
        verdict.add_metric([state], 1 if network.verdict == state else 0)
    yield verdict
    grouped: Dict[str, List[Tuple[Dict[str, str], float]]] = {}
    for name, labels, value in port_metrics(network.ports):
        grouped.setdefault(name, []).append((labels, value))
    for name, samples in grouped.items():
        labels = ("hca", "port", "link_layer")
        if name.endswith("_total"):
            family = _counter(name, "The port's %s counter, as the HCA's driver counts it"
                              % name[len("gpufleet_ib_port_"):-len("_total")], labels)
        else:
            family = _gauge(name, _IB_HELP.get(name, name), labels)
        for sample_labels, value in samples:
            family.add_metric([sample_labels[label] for label in labels], value)
        yield family


def _job_families(jobs: JobsView) -> Iterator:
    """Per rank the heartbeat and the step (when the file gives one), per job its window and whether it stalled."""
    heartbeat = _gauge("gpufleet_job_progress_timestamp_seconds",
                       "When the job's rank last reported progress (its progress file's modification time)",
                       ("job_id", "rank"))
    step = _gauge("gpufleet_job_progress_step", "The step the job's rank last reported", ("job_id", "rank"))
    for rank in jobs.ranks:
        heartbeat.add_metric([rank.job_id, str(rank.rank)], rank.updated)
        if rank.step is not None:
            step.add_metric([rank.job_id, str(rank.rank)], rank.step)
    window = _gauge("gpufleet_job_stall_window_seconds",
                    "How long a rank of the job may report nothing before the job counts as stalled", ("job_id",))
    stalled = _gauge("gpufleet_job_stalled", "1 when a rank of the job reported no progress for its window",
                     ("job_id",))
    for job_id, seconds in sorted(jobs.windows.items(), key=lambda item: int(item[0])):
        window.add_metric([job_id], seconds)
        stalled.add_metric([job_id], 1 if job_id in jobs.stalled else 0)
    ignored = _gauge("gpufleet_job_progress_files_ignored",
                     "Entries of the progress directory that are not a rank's file (<job>.<rank>, regular, "
                     "within the agent's limit)")
    ignored.add_metric([], jobs.ignored)
    yield from (heartbeat, step, window, stalled, ignored)


def _snapshot_families(snapshots: List[GpuSnapshot], uuids: Dict[int, str]) -> Iterator:
    ids = ("gpu", "uuid")
    lost = _gauge("gpufleet_gpu_lost", "1 when the GPU has fallen off the bus", ids)
    temperature = _gauge("gpufleet_gpu_temperature_celsius", "GPU core temperature", ids)
    power = _gauge("gpufleet_gpu_power_watts", "GPU power draw", ids)
    ecc = _counter("gpufleet_gpu_ecc_errors_total", "ECC errors as NVML counts them", (*ids, "type", "counter"))
    retired = _gauge("gpufleet_gpu_retired_pages_pending", "1 when retired pages wait for a GPU reset", ids)
    remapped = _gauge("gpufleet_gpu_remapped_rows", "Row remapping: rows remapped, and pending/failed flags",
                      (*ids, "kind"))
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
        if snap.throttle_reasons is not None:
            for bit, reason in THROTTLE_REASONS:
                throttle.add_metric([*labels, reason], 1 if snap.throttle_reasons & bit else 0)
    yield from (lost, temperature, power, ecc, retired, remapped, throttle)


def _nvlink_families(snapshots: List[GpuSnapshot], uuids: Dict[int, str]) -> Iterator:
    nvlink_errors = _counter("gpufleet_gpu_nvlink_errors_total", "NVLink error counters",
                             ("gpu", "uuid", "link", "kind"))
    nvlink_active = _gauge("gpufleet_gpu_nvlink_active", "1 when the NVLink is up", ("gpu", "uuid", "link"))
    for snap in snapshots:
        if snap.lost:
            continue
        labels = [str(snap.index), snap.uuid or uuids.get(snap.index, "")]
        for link in snap.nvlinks:
            _maybe(nvlink_active, [*labels, str(link.link)], link.active)
            for attribute, kind in NVLINK_KINDS:
                _maybe(nvlink_errors, [*labels, str(link.link), kind], getattr(link, attribute))
    yield from (nvlink_errors, nvlink_active)


def _nvlink_key(snapshots: List[GpuSnapshot], uuids: Dict[int, str]) -> Tuple:
    """What the NVLink families' text depends on, compared by value."""
    return tuple((snap.index, snap.uuid or uuids.get(snap.index, ""), snap.lost, snap.nvlinks) for snap in snapshots)


def _maybe(family, labels: List[str], value) -> None:
    """A series only for the fields this GPU has: NOT_SUPPORTED stays absent, never 0."""
    if value is None:
        return
    family.add_metric(labels, float(value))


class _CachedText:
    """A part of the scrape's text, rendered again only when its key changed."""

    def __init__(self) -> None:
        self._key: Any = None
        self._text = b""

    def text(self, key: Any, produce: Callable[[], Iterable]) -> bytes:
        if self._key is None or key != self._key:
            self._text = render_families(produce())
            self._key = key
        return self._text


class Exposition:
    """The scrape's text (Prometheus text format 0.0.4) of the view ``view()`` returns: every
    family rendered by ``text_format``. The NVLink and the InfiniBand families are kept until
    their readings change: the slow fields are read every 30th snapshot and a port's counters every
    10 s (``agent.network.FULL_EVERY_S``), and Prometheus may scrape every second."""

    def __init__(self, view: Callable[[], MetricsView]) -> None:
        self.view = view
        self._lock = threading.Lock()
        self._nvlink = _CachedText()
        self._network = _CachedText()

    def render(self) -> bytes:
        current = self.view()
        network = current.network
        with self._lock:  # scrapes may come in parallel; each sees a whole text
            links = self._nvlink.text(_nvlink_key(current.snapshots, current.uuids),
                                      lambda: _nvlink_families(current.snapshots, current.uuids))
            # Ports compare by value (a light reading carries the same IbPort objects).
            ports = b"" if network is None else self._network.text(
                (network.verdict, list(network.ports)), lambda: _network_families(network))
        return render_families(families(current)) + ports + links

    def app(self, environ: Dict[str, Any], start_response: Callable) -> List[bytes]:
        """A WSGI app: the text on GET /metrics (and /), 404 elsewhere."""
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: the agent serves /metrics\n"]
        body = self.render()
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the base class names it "format"
        """A scrape a second is no log line."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class MetricsServer:
    """The agent's /metrics endpoint, served from a thread that sleeps until a scrape or ``shutdown()``.

    socketserver's ``serve_forever`` wakes every ``poll_interval`` (0.5 s) to look for a shutdown
    request: about 0.015 % of a core for an agent nobody scrapes, more than a tenth of its budget.
    This loop waits on the listening socket and a pipe that ``shutdown()`` writes to, so it wakes
    only for a connection or to stop, and stops at once."""

    def __init__(self, server: WSGIServer) -> None:
        self.server = server
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="metrics", daemon=True)

    @property
    def server_port(self) -> int:
        return self.server.server_port

    def start(self) -> None:
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.server.fileno(), selectors.EVENT_READ, "scrape")
            selector.register(self._wake_read, selectors.EVENT_READ, "stop")
            while True:
                for key, _mask in selector.select():
                    if key.data == "stop":
                        return
                    # Only this thread accepts, so the connection is still there: no wait here.
                    self.server.handle_request()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop serving (a scrape in progress finishes in its own thread)."""
        os.write(self._wake_write, b"x")
        self._thread.join(timeout)

    def server_close(self) -> None:
        self.server.server_close()
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)


def serve(view: Callable[[], MetricsView], address: str, port: int) -> MetricsServer:
    """The agent's /metrics endpoint, served from a thread; ``shutdown()`` and ``server_close()``
    stop it."""
    server = MetricsServer(make_server(address, port, Exposition(view).app, _ThreadingServer,
                                       handler_class=_QuietHandler))
    server.start()
    return server


def render(view: MetricsView) -> str:
    """The exposition text of one view (tests and ``--once``)."""
    return Exposition(lambda: view).render().decode("utf-8")
