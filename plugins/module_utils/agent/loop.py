# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent: three sources in, four publishers out, one thread that judges.

Sources (each a thread feeding one queue):
* NVML events: ``NvmlReader.wait_for_xid`` blocks in ``nvmlEventSetWait`` - no polling;
* the kernel log: a follower (``kernel_log_source``);
* the snapshot clock: the judging thread itself takes an NVML snapshot every ``interval``.

Every input re-judges the node (``NodeState``) at once, then publishes:
* the metrics (read at scrape time from a copy made under the lock);
* the health events to the journal file (synchronously: it is local and the audit trail);
* the node condition and Kubernetes Events (``KubePublisher``, its own thread, never waited on);
* the fast fence (``FastFence``, its own thread), when enabled.

Faults survived: NVML errors (counted; the newest good snapshot stays; a lost GPU is a verdict,
not an error), the API server down (the publisher retries), Slurm down (the fence retries), a
deleted or rotated kernel-log file (the follower re-opens it), its own restart (the fault journal,
``fault_journal``: unresolved XID faults and the kernel-log position come back within the same
boot and fault window). SIGHUP reloads the configuration (a bad file is logged and ignored),
SIGUSR1 forgets the XID history (after a GPU reset; the fault journal is emptied too), SIGTERM and
SIGINT stop cleanly.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent import fault_journal, journal
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.condition import (
    health_condition,
    unknown_condition,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import AgentConfig
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.fast_fence import (
    FastFence,
    fence_client,
    fence_reason,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.jobs import JobWatch
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.kernel_log_source import make_follower
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.kube_publisher import KubePublisher
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.metrics import MetricsView
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.metrics import serve as metrics_server
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.network import NetworkWatch
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.node_state import HealthEvent, NodeState
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import XidEvent
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.nvml import NvmlReader
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import build_thresholds
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.agent_client import agent_api

VERSION = "0.3.0"
LOG = logging.getLogger("gpufleet.agent")
NVML_RETRY_S = 5.0
# A snapshot failing this many times in a row turns the condition Unknown.
SNAPSHOT_FAILURES_UNKNOWN = 3
LOST_EVENT_MARK = "NVML_ERROR_GPU_IS_LOST"
# The slow fields (NVLink states and error counters, aggregate ECC counts) are read on every 30th
# snapshot, and on the first after any XID, and carried over by the reader in between. NVLinks are 5
# NVML calls per link (720 for 8 GPUs x 18 links, most of the agent's CPU); their counters' alert
# looks at 10 minutes and fires after 5; a link that fails raises XID 74 (and a flapping one XIDs
# 144-150), which the event path sees at once and which makes the next snapshot a full one; and no
# verdict reads the aggregate ECC counts (the volatile ones are read every second).
FULL_EVERY = 30
# The fault journal is rewritten at once for an XID, but at most this often (an XID storm): a
# change within it is written on the next snapshot tick. A kernel-log position alone (lines
# without an XID) waits for the next write, or POSITION_EVERY_S.
FAULT_JOURNAL_MIN_S = 0.5
POSITION_EVERY_S = 10.0
# After a failed write (a full or read-only disk) the snapshot tick retries this much later, so the
# error is counted and logged every 30 s, not every second.
FAULT_JOURNAL_RETRY_S = 30.0


class Agent:
    def __init__(self, config: AgentConfig, reload: Optional[Callable[[], AgentConfig]] = None,
                 reader_factory: Callable[[Optional[str]], Any] = NvmlReader,
                 clock: Callable[[], float] = time.time,
                 boot_id: Callable[[], Optional[str]] = fault_journal.read_boot_id) -> None:
        self.config = config
        self.reload_config = reload
        self.reader_factory = reader_factory
        self.clock = clock
        self.boot_id = boot_id
        self.fault_journal_path = fault_journal.state_path(config.journal)
        self._boot_id: Optional[str] = None
        self._kernel_log_position: Optional[Dict[str, Any]] = None
        self._fault_journal_dirty = False
        self._position_dirty = False
        self._fault_journal_written = float("-inf")  # monotonic
        self._fault_journal_retry_at = float("-inf")  # monotonic
        self.state = NodeState(config.node, build_thresholds(config.thresholds), config.driver_version)
        self._lock = threading.Lock()
        self._queue: "queue.Queue[tuple]" = queue.Queue()
        self._reader: Any = None
        self._nvml_error: Optional[str] = None
        self._snapshot_failures = 0
        self._snapshots_taken = 0
        self._full_next = True  # the next snapshot reads the slow fields too
        self._stop_flag = False
        self._threads_stop = threading.Event()
        self._publisher: Optional[KubePublisher] = None
        self._fence: Optional[FastFence] = None
        self._follower: Any = None
        self._metrics_server: Any = None
        self.view = MetricsView(node=config.node, version=VERSION, driver_version="",
                                kernel_log_source=config.kernel_log.source, up=False)
        self.view.errors = {}
        self.view.xid_events = {}
        ib = config.infiniband
        self.network = NetworkWatch(config.node, ib.sysfs_root, ib.thresholds) if ib.enabled else None
        jobs = config.jobs
        self.jobs = JobWatch(config.node, jobs.progress_dir, jobs.stall_after_s) if jobs.enabled else None

    # -- counters shared with the publisher threads ------------------------------------------
    def count_error(self, source: str, message: str = "") -> None:
        with self._lock:
            self.view.errors[source] = self.view.errors.get(source, 0) + 1
        if message:
            LOG.warning("%s error: %s", source, message, extra={"source": source})

    def metrics_view(self) -> MetricsView:
        with self._lock:
            return replace(self.view, errors=dict(self.view.errors), xid_events=dict(self.view.xid_events),
                           gpu_states=dict(self.view.gpu_states), uuids=dict(self.view.uuids),
                           xid_counts=dict(self.view.xid_counts), snapshots=list(self.view.snapshots))

    # -- life cycle ------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        """Route SIGHUP, SIGUSR1, SIGTERM and SIGINT through the judging thread's queue.

        The signals are blocked in every thread (call this before ``run`` starts any) and one
        thread takes them with ``sigwait``: each becomes a queue item, handled at once and in
        order with the faults around it - a SIGUSR1 sent before an XID forgets only what came
        before. (A Python handler could not put into the queue safely: it may interrupt the
        judging thread while that holds the queue's lock.)
        """
        wanted = {signal.SIGHUP, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT}
        signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
        names = {signal.SIGHUP: "reload", signal.SIGUSR1: "forget", signal.SIGTERM: "stop", signal.SIGINT: "stop"}

        def take_signals() -> None:
            while True:
                received = signal.sigwait(wanted)
                self._queue.put((names[received],))
                if names[received] == "stop":
                    return

        threading.Thread(target=take_signals, name="signals", daemon=True).start()

    def request_stop(self) -> None:
        self._queue.put(("stop",))

    def run(self) -> int:
        # NVML and the fault journal first, so the first scrape and the first condition already
        # carry a restored fault (NVML unavailable now: the first snapshot retries and says so).
        self._open_nvml()
        self.restore()
        self._prepare_jobs()
        self._start_metrics()
        self._start_publishers()
        self._start_follower()
        nvml_thread = threading.Thread(target=self._nvml_events, name="nvml-events", daemon=True)
        nvml_thread.start()
        LOG.info("agent started", extra={"node": self.config.node, "interval": self.config.interval,
                                         "kernel_log": self.config.kernel_log.source,
                                         "metrics": "%s:%d" % (self.config.metrics.address,
                                                               self.config.metrics.port)})
        next_tick = time.monotonic()
        try:
            while not self._stop_flag:
                now_mono = time.monotonic()
                if now_mono >= next_tick:
                    lag = now_mono - next_tick
                    self._snapshot(lag)
                    next_tick += self.config.interval
                    if next_tick < time.monotonic():  # far behind (suspended, overloaded): skip, don't burst
                        next_tick = time.monotonic() + self.config.interval
                    continue
                try:
                    item = self._queue.get(timeout=max(0.0, next_tick - now_mono))
                except queue.Empty:
                    continue
                self._handle(item)
        finally:
            self._shutdown(nvml_thread)
        LOG.info("agent stopped", extra={"node": self.config.node})
        return 0

    def _shutdown(self, nvml_thread: threading.Thread) -> None:
        self._threads_stop.set()
        if self._follower is not None:
            self._follower.stop()
        # What the follower handed over before it stopped, then the newest state.
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item[0] in ("xid", "kernel_log_read"):
                self._handle(item)
        self.persist(force=True)
        nvml_thread.join(2.0)
        if self._publisher is not None:
            self._publisher.stop()
        if self._fence is not None:
            self._fence.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        if self._reader is not None:
            with contextlib.suppress(Exception):  # shutting down; NVML may be gone already
                self._reader.close()

    # -- sources -------------------------------------------------------------------------------
    def _open_nvml(self) -> None:
        if self._reader is not None:
            return
        try:
            reader = self.reader_factory(self.config.nvml_library_path)
            reader.open()
            inventory = reader.inventory()
            driver = reader.driver_version()
            reader.watch_xids()
        except Exception as exc:  # NvmlUnavailable, NvmlError: report, retry later
            self._nvml_error = str(exc)
            self.count_error("nvml", "cannot open NVML: %s" % exc)
            with self._lock:
                self.view.up = False
            if self._publisher is not None:
                self._publisher.offer(unknown_condition(self._nvml_error))
            return
        self._reader = reader
        self._nvml_error = None
        with self._lock:
            replaced = self.state.set_inventory(inventory, driver)
            self.view.driver_version = driver or ""
            self.view.uuids = {gpu.index: gpu.uuid or "" for gpu in inventory}
            self.view.up = True
        if replaced:
            self._gpus_replaced(replaced)

    def _nvml_events(self) -> None:
        """The NVML event thread: block in nvmlEventSetWait, hand events to the judging thread."""
        while not self._threads_stop.is_set():
            reader = self._reader
            if reader is None:
                self._threads_stop.wait(NVML_RETRY_S)
                continue
            try:
                events = reader.wait_for_xid(1.0)
            except Exception as exc:  # NvmlError: count, back off, go on
                self.count_error("nvml", "waiting for XID events: %s" % exc)
                self._threads_stop.wait(1.0)
                continue
            if not events:
                continue
            lost = [event for event in events if LOST_EVENT_MARK in event.message]
            real = [event for event in events if LOST_EVENT_MARK not in event.message]
            if real:
                self._queue.put(("xid", real, "nvml"))
            if lost:
                # The wait says a GPU is lost; the snapshot says which. Then wait a tick, or the
                # wait returns the same news in a tight loop.
                self._queue.put(("snapshot_now",))
                self._threads_stop.wait(self.config.interval)

    def _prepare_jobs(self) -> None:
        if self.jobs is None:
            return
        try:
            self.jobs.prepare()
        except OSError as exc:  # a read-only or foreign directory: read what the jobs write there anyway
            self.count_error("jobs", "cannot prepare %s: %s" % (self.jobs.progress_dir, exc))

    def _start_follower(self) -> None:
        cfg = self.config.kernel_log
        self._follower = make_follower(cfg.source, self.config.kernel_log_path,
                                       lambda events: self._queue.put(("xid", events, "kernel_log")),
                                       lambda message: self.count_error("kernel_log", message),
                                       on_read=lambda events, position: self._queue.put(
                                           ("kernel_log_read", events, position)),
                                       resume=self._kernel_log_position)
        if self._follower is not None:
            self._follower.start()

    def _start_metrics(self) -> None:
        self._metrics_server = metrics_server(self.metrics_view, self.config.metrics.address,
                                              self.config.metrics.port)

    def _start_publishers(self) -> None:
        kube = self.config.kubernetes
        if kube.enabled:
            self._publisher = KubePublisher(
                self.config.node, lambda: agent_api(kube.kubeconfig, kube.context), kube.heartbeat, kube.backoff_max,
                events=kube.events, on_error=lambda message: self.count_error("kubernetes", message))
            self._publisher.start()
        self._start_fence()

    def _start_fence(self) -> None:
        fence = self.config.fast_fence
        if fence.enabled:
            self._fence = FastFence(self.config.node, lambda: fence_client(fence.slurm_params()),
                                    on_error=lambda message: self.count_error("slurm", message),
                                    on_fenced=self._fenced)
            self._fence.start()

    # -- judging ----------------------------------------------------------------------------
    def _handle(self, item: tuple) -> None:
        kind = item[0]
        if kind == "xid":
            events: List[XidEvent] = item[1]
            self._full_next = True
            with self._lock:
                self.view.xid_events[item[2]] = self.view.xid_events.get(item[2], 0) + len(events)
                records = self.state.add_events(events, self.clock())
            self._publish(records)
            self.persist()
        elif kind == "kernel_log_read":
            # The events of one read and the position after it, recorded together: a restart
            # neither reads those lines again nor misses the ones after them.
            self._kernel_log_position = item[2]
            if item[1]:
                self._handle(("xid", item[1], "kernel_log"))
            else:  # lines without an XID are harmless to read twice: written with the next write
                self._position_dirty = True
        elif kind == "snapshot_now":
            self._snapshot(0.0)
        elif kind == "reload":
            self._reload()
        elif kind == "forget":
            self._forget()
        elif kind == "stop":
            self._stop_flag = True

    def _snapshot(self, lag: float) -> None:
        self._network_tick()  # the ports and the jobs need no NVML
        self._jobs_tick()
        if self._reader is None:
            self._open_nvml()
            if self._reader is None:
                return
        started = time.monotonic()
        full = self._full_next or self._snapshots_taken % FULL_EVERY == 0
        try:
            snapshots = self._reader.snapshot(full=full)
        except Exception as exc:  # NvmlError: keep the last good snapshot
            self._snapshot_failures += 1
            self.count_error("nvml", "snapshot: %s" % exc)
            with self._lock:
                self.view.up = False
            if self._snapshot_failures >= SNAPSHOT_FAILURES_UNKNOWN and self._publisher is not None:
                self._publisher.offer(unknown_condition("NVML snapshot failed %d times: %s"
                                                        % (self._snapshot_failures, exc)))
            return
        self._snapshot_failures = 0
        self._snapshots_taken += 1
        if full:
            self._full_next = False
        now = self.clock()
        with self._lock:
            records = self.state.set_snapshots(snapshots, now)
            self.view.up = True
            self.view.loop_lag = lag
            self.view.snapshot_duration = time.monotonic() - started
            self.view.last_snapshot = now
        self._publish(records, always=True)
        moment = time.monotonic()
        if moment >= self._fault_journal_retry_at and (self._fault_journal_dirty or (
                self._position_dirty and moment - self._fault_journal_written >= POSITION_EVERY_S)):
            self.persist(force=True)

    def _publish(self, records: List[HealthEvent], always: bool = False) -> None:
        with self._lock:
            verdict = self.state.verdict
            self.view.verdict = verdict.state
            self.view.gpu_states = self.state.gpu_states()
            self.view.xid_counts = dict(self.state.xid_counts)
            self.view.snapshots = list(self.state.snapshots)
            for index in self.view.gpu_states:
                self.view.uuids.setdefault(index, self.state.uuid_of(index))
            gpu_count = len(self.state.inventory) or len(self.state.snapshots)
        condition = health_condition(verdict, gpu_count)
        for record in records:
            self._announce(record.to_dict(), "health", "node verdict %s, %s" % (record.verdict, record.verdict_action))
        if not records and not always:
            return
        if self._publisher is not None:
            self._publisher.offer(condition)
        if self._fence is not None:
            self._fence.update(verdict.state == "fatal", fence_reason(condition.reason, condition.message))

    def _network_tick(self) -> None:
        """Read and judge the IB ports; journal, announce and publish what changed."""
        if self.network is None:
            return
        if not self._watch_tick(self.network, "infiniband", "network", "node network verdict"):
            return
        condition = self.network.condition()
        if condition is not None and self._publisher is not None:
            self._publisher.offer(condition)

    def _jobs_tick(self) -> None:
        """Read and judge the jobs' progress files; journal and announce the stalls that began or ended."""
        if self.jobs is not None:
            self._watch_tick(self.jobs, "jobs", "jobs", "job")

    def _watch_tick(self, watch: Any, source: str, field: str, verdict: str) -> bool:
        """One tick of a watch beside NVML (``NetworkWatch``, ``JobWatch``): its view to the metrics'
        ``field``, its records announced (as ``field`` events). False when it could not read
        (``source`` counts the error and the last judgement stays)."""
        try:
            records = watch.tick(self.clock())
        except GpufleetError as exc:
            self.count_error(source, str(exc))
            return False
        with self._lock:
            setattr(self.view, field, watch.view)
        for record in records:
            self._announce(record, field, "%s %s" % (verdict, record["verdict"]))
        return True

    def _announce(self, record: Dict[str, Any], what: str, verdict: str) -> None:
        """One health record (``what``: health, network or jobs): the journal line, the log line and the
        Kubernetes Event, whose message ends with ``verdict``."""
        self._journal(record)
        summary = record["fault"].get("summary", "")
        cleared = record["event"] == "cleared"
        LOG.warning("%s event", what,
                    extra={"event": record["event"], "reason": record["reason"], "verdict": record["verdict"],
                           "summary": summary})
        if self._publisher is not None:
            self._publisher.emit(record["reason"], "%s%s (%s)" % ("cleared: " if cleared else "", summary, verdict),
                                 "Normal" if cleared else "Warning")

    def _journal(self, record: Dict[str, Any]) -> None:
        try:
            journal.append(self.config.journal, record)
        except OSError as exc:
            self.count_error("journal", "cannot append to %s: %s" % (self.config.journal, exc))

    # -- the fault journal (what a restart must not forget) ------------------------------------
    def restore(self) -> None:
        """Take back the unresolved XID faults and the kernel-log position of the agent's last run.

        Same boot and inside the window only; events of a GPU replaced meanwhile are dropped. An
        unreadable or corrupt fault journal is logged with its path and counted, and the agent
        starts clean; it is replaced by the next write.
        """
        path = self.fault_journal_path
        self._boot_id = self.boot_id()
        now = self.clock()
        try:
            restored = fault_journal.restore(fault_journal.read(path), self.config.node, self._boot_id, now,
                                             self.state.thresholds.window_s, path)
        except fault_journal.FaultJournalError as exc:
            self.count_error("journal", "fault journal ignored, starting with no XID history: %s" % exc)
            restored = fault_journal.Restored(cleared_by="unreadable fault journal")
        self._kernel_log_position = restored.kernel_log
        dropped = dict(restored.dropped)
        kept = 0
        if restored.events:
            with self._lock:
                replaced = self.state.restore_events(restored.events, now)
            if replaced:
                dropped["gpu_replaced"] = replaced
            kept = len(restored.events) - replaced
        LOG.info("fault journal read", extra={"path": path, "restored": kept, "dropped": dropped,
                                              "cleared_by": restored.cleared_by})
        self._publish([])  # the metrics' view, before anything is published
        if kept or dropped:
            # The audit trail says why the node is still (or no longer) unhealthy after a restart.
            self._journal({"time": now, "node": self.config.node, "event": "restored", "restored": kept,
                           "dropped": dropped, "reason": restored.cleared_by or "restart"})
        self.persist(force=True)

    def persist(self, force: bool = False) -> None:
        """Rewrite the fault journal (atomically); at most every ``FAULT_JOURNAL_MIN_S`` unless forced."""
        if not force and time.monotonic() - self._fault_journal_written < FAULT_JOURNAL_MIN_S:
            self._fault_journal_dirty = True
            return
        with self._lock:
            content = fault_journal.document(self.config.node, self._boot_id, list(self.state.events),
                                             self._kernel_log_position, self.clock())
        self._fault_journal_dirty = self._position_dirty = False
        self._fault_journal_written = time.monotonic()
        try:
            fault_journal.write(self.fault_journal_path, content)
        except OSError as exc:
            self._fault_journal_dirty = True
            self._fault_journal_retry_at = time.monotonic() + FAULT_JOURNAL_RETRY_S
            self.count_error("journal", "cannot write the fault journal %s: %s" % (self.fault_journal_path, exc))

    def _gpus_replaced(self, dropped: int) -> None:
        LOG.warning("XID history of replaced GPUs dropped", extra={"node": self.config.node, "dropped": dropped})
        self._journal({"time": self.clock(), "node": self.config.node, "event": "forgotten", "dropped": dropped,
                       "reason": "GpuReplaced"})
        self.persist(force=True)

    def _fenced(self, outcome: str, reason: str) -> None:
        LOG.warning("fast fence", extra={"outcome": outcome, "reason": reason})
        self._journal({"time": self.clock(), "node": self.config.node, "event": "fenced", "outcome": outcome,
                       "reason": reason})

    # -- signals ---------------------------------------------------------------------------------
    def _reload(self) -> None:
        if self.reload_config is None:
            return
        try:
            new = self.reload_config()
            thresholds = build_thresholds(new.thresholds)
        except Exception as exc:  # a bad file keeps the running configuration
            self.count_error("config", "reload refused, keeping the running configuration: %s" % exc)
            return
        restart_needed = [name for name in ("node", "metrics", "nvml_library_path", "kernel_log")
                          if getattr(new, name) != getattr(self.config, name)]
        if restart_needed:
            LOG.warning("reload: %s change only on restart", ", ".join(restart_needed))
        kept = {name: getattr(self.config, name) for name in restart_needed}
        new = replace(new, **kept)
        old_ib = self.config.infiniband
        if (new.infiniband.enabled, new.infiniband.sysfs_root) != (old_ib.enabled, old_ib.sysfs_root):
            LOG.warning("reload: infiniband.enabled and infiniband.sysfs_root change only on restart")
            new = replace(new, infiniband=replace(new.infiniband, enabled=old_ib.enabled, sysfs_root=old_ib.sysfs_root))
        if self.network is not None:
            self.network.reconfigure(new.infiniband.thresholds)
        if new.jobs.progress_dir != self.config.jobs.progress_dir or new.jobs.enabled != self.config.jobs.enabled:
            LOG.warning("reload: jobs.enabled and jobs.progress_dir change only on restart")
            new = replace(new, jobs=replace(new.jobs, enabled=self.config.jobs.enabled,
                                            progress_dir=self.config.jobs.progress_dir))
        if self.jobs is not None:
            self.jobs.reconfigure(new.jobs.stall_after_s)
        with self._lock:
            self.state.thresholds = thresholds
            if new.driver_version is not None:
                self.state.driver_version = new.driver_version
        if self._publisher is not None:
            self._publisher.reconfigure(new.kubernetes.heartbeat, new.kubernetes.backoff_max, new.kubernetes.events)
        if new.fast_fence != self.config.fast_fence:
            if self._fence is not None:
                self._fence.stop()
                self._fence = None
            self.config = new
            self._start_fence()
        self.config = new
        logging.getLogger("gpufleet").setLevel(new.log_level.upper())
        LOG.info("configuration reloaded", extra={"fast_fence": new.fast_fence.enabled,
                                                  "interval": new.interval})
        # Re-judge and re-publish with the new thresholds at once.
        self._snapshot(0.0)

    def _forget(self) -> None:
        with self._lock:
            dropped = len(self.state.events)
            self.state.forget_xids(self.clock())
        self.persist(force=True)  # a restart after the reset must not bring the faults back
        LOG.warning("XID history forgotten (SIGUSR1)", extra={"node": self.config.node, "dropped": dropped})
        # The audit trail says why the node turned healthy.
        self._journal({"time": self.clock(), "node": self.config.node, "event": "forgotten", "dropped": dropped,
                       "reason": "SIGUSR1"})
        self._snapshot(0.0)
