# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Publish the node conditions and the health Events to the API server, off the sensing loop.

The loop hands over the newest condition of each type (``offer``: ``GpuHealthy``, and
``InfiniBandHealthy`` on a node with HCAs) and new health events (``emit``) and never waits. One
worker thread writes them:

* each condition when it differs from what the API server last accepted, and once per heartbeat
  otherwise - so 1,000 healthy agents make 1,000 writes per heartbeat, not per second;
* while the API server is down, writes fail and are retried with a capped exponential backoff;
  only the newest condition is kept, so when the server returns it gets the state of now, not a
  replay of every flap;
* Events queue up to ``EVENT_BACKLOG`` (the oldest are dropped and counted: the journal file
  keeps every one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.node_status import (
    NodeCondition,
    create_node_event,
    event_body,
    patch_node_condition,
)

EVENT_BACKLOG = 256
COMPONENT = "gpufleet-agent"
FIRST = "GpuHealthy"  # written first when several conditions are due
LOG = logging.getLogger("gpufleet.agent.kube")


class KubePublisher:
    def __init__(self, node: str, api_factory: Callable[[], Any], heartbeat: float, backoff_max: float,
                 events: bool = True, on_error: Optional[Callable[[str], None]] = None,
                 on_write: Optional[Callable[[str], None]] = None, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.api_factory = api_factory
        self.heartbeat = heartbeat
        self.backoff_max = backoff_max
        self.events_enabled = events
        self.on_error = on_error or (lambda what: None)
        self.on_write = on_write or (lambda what: None)
        self.clock = clock
        self._api: Any = None
        # By condition type: what the loop wants, what the API server last accepted and when, and
        # when the status or reason last changed.
        self._wanted: Dict[str, NodeCondition] = {}
        self._written: Dict[str, NodeCondition] = {}
        self._written_at: Dict[str, float] = {}
        self._transition_at: Dict[str, float] = {}
        # A condition whose write failed waits its own backoff: one the API server refuses (a policy
        # without InfiniBandHealthy) never holds back GpuHealthy or the Events.
        self._retry_at: Dict[str, float] = {}
        self._backoff: Dict[str, float] = {}
        self._events: Deque[Dict[str, Any]] = deque()
        self.dropped_events = 0
        self.writes = 0
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="kube-publisher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout)

    # -- called by the loop; never block ------------------------------------------------------
    def offer(self, condition: NodeCondition) -> None:
        with self._wake:
            if condition != self._wanted.get(condition.type):
                self._wanted[condition.type] = condition
                self._wake.notify()

    def emit(self, reason: str, message: str, event_type: str = "Warning") -> None:
        if not self.events_enabled:
            return
        with self._wake:
            if len(self._events) >= EVENT_BACKLOG:
                self._events.popleft()
                self.dropped_events += 1
            self._events.append(dict(reason=reason, message=message, type=event_type, at=self.clock()))
            self._wake.notify()

    def reconfigure(self, heartbeat: float, backoff_max: float, events: bool) -> None:
        with self._wake:
            self.heartbeat, self.backoff_max, self.events_enabled = heartbeat, backoff_max, events
            self._wake.notify()

    # -- the worker ----------------------------------------------------------------------------
    def _due(self) -> Optional[NodeCondition]:
        """The first condition to write now: changed, or its heartbeat is due, and not waiting out
        the backoff of a failed write. GpuHealthy first: the remediation reads it."""
        now = self.clock()
        for kind in sorted(self._wanted, key=lambda kind: kind != FIRST):
            wanted = self._wanted[kind]
            if now < self._retry_at.get(kind, 0.0):
                continue
            if wanted != self._written.get(kind) or now - self._written_at[kind] >= self.heartbeat:
                return wanted
        return None

    def _wait_s(self) -> float:
        """Until the next heartbeat of a condition written as wanted, or the next retry of a failed one."""
        now = self.clock()
        waits = []
        for kind, wanted in self._wanted.items():
            if self._retry_at.get(kind, 0.0) > now:
                waits.append(self._retry_at[kind] - now)
            elif wanted == self._written.get(kind):
                waits.append(self.heartbeat - (now - self._written_at[kind]))
        return max(0.05, min(waits)) if waits else self.heartbeat

    def _run(self) -> None:
        backoff = 0.0  # the Events' and the client's own
        while True:
            with self._wake:
                while not self._stop and not self._events and self._due() is None:
                    self._wake.wait(self._wait_s())
                if self._stop:
                    return
                condition = self._due()
                event = self._events[0] if self._events else None
            try:
                api = self._api or self.api_factory()
                self._api = api
                if condition is not None:
                    self._try_condition(api, condition)
                if event is not None:
                    create_node_event(api, event_body(self.node, event["reason"], event["message"], event["type"],
                                                      COMPONENT, event["at"]))
                    self.writes += 1
                    self.on_write("event")
                    with self._wake:
                        if self._events and self._events[0] is event:
                            self._events.popleft()
                backoff = 0.0
            except Exception as exc:  # KubeError, or a client that cannot even be built
                self.on_error(str(exc))
                backoff = min(self.backoff_max, max(0.5, backoff * 2))
                LOG.warning("kubernetes write failed, retrying in %.1fs: %s", backoff, exc)
                with self._wake:
                    if not self._stop:
                        self._wake.wait(backoff)

    def _try_condition(self, api: Any, condition: NodeCondition) -> None:
        """Write one condition; a failure is counted and backs off that condition alone."""
        kind = condition.type
        try:
            self._write_condition(api, condition)
        except Exception as exc:  # KubeError: refused, or the server is away
            self.on_error(str(exc))
            delay = min(self.backoff_max, max(0.5, self._backoff.get(kind, 0.0) * 2))
            with self._wake:
                self._backoff[kind], self._retry_at[kind] = delay, self.clock() + delay
            LOG.warning("kubernetes write of %s failed, retrying in %.1fs: %s", kind, delay, exc)
            return
        with self._wake:
            self._backoff.pop(kind, None)
            self._retry_at.pop(kind, None)

    def _write_condition(self, api: Any, condition: NodeCondition) -> None:
        now = self.clock()
        written = self._written.get(condition.type)
        if written is None or (condition.status, condition.reason) != (written.status, written.reason):
            transition = now
        else:
            transition = self._transition_at[condition.type]
        patch_node_condition(api, self.node, condition, heartbeat_at=now, transition_at=transition)
        self.writes += 1
        self.on_write("condition")
        with self._wake:
            self._written[condition.type] = condition
            self._written_at[condition.type] = now
            self._transition_at[condition.type] = transition
