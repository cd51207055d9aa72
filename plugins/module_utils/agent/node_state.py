# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What one agent knows about its node: the XID events of the window, the newest NVML snapshot,
and the verdict the health core draws from them. Pure: no threads, no I/O, the clock is passed in.

The agent is a loop around ``health.verdict.evaluate``: every change (an XID event, a snapshot)
re-judges the whole window, so a repeated XID escalates by exactly the thresholds and context
rules ``gpu_health`` uses (XID 45 next to 79, 48 with 63, repeats of 13 by GPC/TPC, ...).

Health events - what the journal file and the Kubernetes Events record - are:

* ``fault``: one per XID occurrence (NVML event or kernel-log line), classified as the verdict
  classifies it at that moment (so a third XID 13 says ``escalated``);
* ``fault`` / ``cleared``: a counter fault (double-bit ECC, over-temperature, GPU lost, ...)
  appearing in or leaving the snapshot.

One XID is often reported twice: by the NVML event and by the driver's kernel-log line. The
second report within ``DUPLICATE_S`` is kept for the verdict (its burst rule counts it once) but
is neither counted in the metrics nor journaled again.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.gpu_condition import HEALTHY_REASON
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    STATES,
    Fault,
    GpuInfo,
    GpuSnapshot,
    HealthVerdict,
    Thresholds,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import with_identity
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.verdict import describe, evaluate, in_window

DUPLICATE_S = 5.0
# An XID storm must not grow the window without bound; the oldest go first.
MAX_EVENTS = 10000
# Reasons for the counter faults' names; XIDs read "Xid79", NVSwitch SXids "SXid12028".
_REASONS = {
    "GPU_FALLEN_OFF_BUS": "GpuLost",
    "ECC_DBE_VOLATILE": "EccDoubleBit",
    "REMAPPED_ROWS_FAILED": "RowRemapFailure",
    "REMAPPED_ROWS_PENDING": "RowRemapPending",
    "RETIRED_PAGES_PENDING": "RetiredPagesPending",
    "THERMAL_THROTTLE": "ThermalThrottle",
    "GPU_TEMPERATURE_HIGH": "OverTemperature",
    "ECC_SBE_VOLATILE_HIGH": "EccSingleBitStorm",
    "NVLINK_INACTIVE": "NvLinkInactive",
    "NVLINK_ERRORS": "NvLinkErrors",
}


@dataclass(frozen=True)
class HealthEvent:
    """One line of the journal (and one Kubernetes Event)."""

    time: float
    node: str
    event: str  # "fault" | "cleared"
    reason: str  # condition-style: Xid79, EccDoubleBit, ...
    fault: Dict[str, Any]
    verdict: str
    verdict_action: str
    source: str
    raw: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {
            "time": self.time, "node": self.node, "event": self.event, "reason": self.reason,
            "verdict": self.verdict, "verdict_action": self.verdict_action, "source": self.source,
            "fault": self.fault, "raw": self.raw,
        }


def fault_reason(fault: Fault) -> str:
    """``Xid79``, ``SXid12028``, ``GpuLost``: a CamelCase word, as condition reasons are."""
    if fault.kind == "sxid" and fault.xid is not None:
        return "SXid%d" % fault.xid
    if fault.kind in ("xid", "fallen_off_bus") and fault.xid is not None:
        return "Xid%d" % fault.xid
    if fault.name in _REASONS:
        return _REASONS[fault.name]
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", fault.name) if part) or "GpuFault"


def verdict_reason(verdict: HealthVerdict) -> str:
    """The condition's reason: the worst effective fault's, or GpusHealthy."""
    for fault in verdict.faults:
        if fault.effective:
            return fault_reason(fault)
    return HEALTHY_REASON


def _same_gpu(event: XidEvent, other: XidEvent) -> bool:
    for attribute in ("gpu_index", "gpu_uuid", "pci_bus_id"):
        mine, theirs = getattr(event, attribute), getattr(other, attribute)
        if mine is not None and theirs is not None:
            return mine == theirs
    return event.gpu_index is None and other.gpu_index is None


def _fault_of(event: XidEvent, verdict: HealthVerdict) -> Optional[Fault]:
    """The verdict's fault that covers this XID event (same code, same device)."""
    for fault in verdict.faults:
        if fault.xid != event.xid or fault.kind != event.kind:
            continue
        if event.gpu_index is not None and fault.gpu_index is not None:
            if fault.gpu_index == event.gpu_index:
                return fault
        elif event.pci_bus_id is not None and fault.pci_bus_id is not None:
            if fault.pci_bus_id == event.pci_bus_id:
                return fault
        elif fault.gpu_index is None and event.gpu_index is None:
            return fault
    return None


def gpu_states(verdict: HealthVerdict, snapshots: Sequence[GpuSnapshot]) -> Dict[int, str]:
    """Each GPU's own verdict: fatal, degraded or healthy by its effective faults."""
    states = {snapshot.index: "healthy" for snapshot in snapshots}
    for fault in verdict.faults:
        if not fault.effective or fault.gpu_index is None:
            continue
        current = states.get(fault.gpu_index, "healthy")
        new = "fatal" if fault.severity == "fatal" else "degraded"
        if STATES.index(new) > STATES.index(current):
            states[fault.gpu_index] = new
    return states


class NodeState:
    """The window of one node; ``add_events`` and ``set_snapshots`` return the health events."""

    def __init__(self, node: str, thresholds: Thresholds, driver_version: Optional[str] = None) -> None:
        self.node = node
        self.thresholds = thresholds
        self.driver_version = driver_version
        self.inventory: List[GpuInfo] = []
        self.snapshots: List[GpuSnapshot] = []
        self.events: Deque[XidEvent] = deque(maxlen=MAX_EVENTS)
        self.verdict: HealthVerdict = evaluate(thresholds=thresholds)
        self.xid_counts: Dict[Tuple[int, str, int, str], int] = {}  # (gpu, uuid, xid, action) -> n
        self._counter_faults: Dict[Tuple[str, Optional[int]], Fault] = {}
        self._recent: Deque[XidEvent] = deque()  # for duplicate detection across sources
        self._judged: Optional[Tuple[tuple, HealthVerdict]] = None  # (what it read, the verdict) of the last judgement

    # -- inputs ---------------------------------------------------------------------------
    def set_inventory(self, inventory: Sequence[GpuInfo], driver_version: Optional[str]) -> int:
        """Take NVML's inventory; returns how many XID events of replaced GPUs it dropped."""
        self.inventory = list(inventory)
        if self.driver_version is None:
            self.driver_version = driver_version
        return self.drop_replaced()

    def restore_events(self, events: Sequence[XidEvent], now: float) -> int:
        """Put back the XID events of an earlier run of the agent (``fault_journal.restore``).

        They are neither counted nor journaled again: they are not news. Events of a GPU that was
        replaced meanwhile are dropped (see ``drop_replaced``); returns how many.
        """
        kept = [event for event in events if not self._replaced(event)]
        merged = sorted(list(self.events) + kept, key=lambda event: event.timestamp or now)
        self.events = deque(merged, maxlen=MAX_EVENTS)
        self._prune(now)
        self.verdict = self._evaluate(now)
        return len(events) - len(kept)

    def drop_replaced(self) -> int:
        """Drop the XID events of GPUs that are not there any more: NVML now shows another UUID
        at the event's PCI address (or, without one, its index). Returns how many were dropped."""
        kept = [event for event in self.events if not self._replaced(event)]
        dropped = len(self.events) - len(kept)
        if dropped:
            self.events = deque(kept, maxlen=MAX_EVENTS)
        return dropped

    def add_events(self, events: Sequence[XidEvent], now: float) -> List[HealthEvent]:
        fresh: List[Tuple[XidEvent, bool]] = []
        for event in events:
            if event.timestamp is None:
                # No clock in the line (a plain file, a bare NVRM line): it arrived now.
                event = replace(event, timestamp=now)
            event = with_identity(event, self.inventory)
            duplicate = self._is_duplicate(event)
            self.events.append(event)
            self._recent.append(event)
            fresh.append((event, duplicate))
        self._prune(now)
        self.verdict = self._evaluate(now)
        records = []
        for event, duplicate in fresh:
            if duplicate:
                continue
            fault = _fault_of(event, self.verdict)
            action = fault.action if fault is not None else "UNKNOWN"
            key = (event.gpu_index if event.gpu_index is not None else -1, event.gpu_uuid or "", event.xid, action)
            self.xid_counts[key] = self.xid_counts.get(key, 0) + 1
            records.append(self._record("fault", event.timestamp or now, fault, event.source, event.raw, event))
        return records

    def set_snapshots(self, snapshots: Sequence[GpuSnapshot], now: float) -> List[HealthEvent]:
        self.snapshots = list(snapshots)
        self._prune(now)
        self.verdict = self._evaluate(now)
        current = {(fault.name, fault.gpu_index): fault for fault in self.verdict.faults
                   if fault.kind == "nvml_counter"}
        records = []
        for key, fault in current.items():
            if key not in self._counter_faults:
                records.append(self._record("fault", now, fault, "nvml"))
        for key, fault in self._counter_faults.items():
            if key not in current:
                records.append(self._record("cleared", now, fault, "nvml"))
        self._counter_faults = current
        return records

    def forget_xids(self, now: float) -> None:
        """Drop the XID history (after a GPU reset or a reboot made it moot); counters stay."""
        self.events.clear()
        self.verdict = self._evaluate(now)

    def tick(self, now: float) -> bool:
        """Re-judge as time passes (events leave the window); True when the verdict changed."""
        before = (self.verdict.state, self.verdict.reason)
        if self._prune(now):
            self.verdict = self._evaluate(now)
        return (self.verdict.state, self.verdict.reason) != before

    # -- views ----------------------------------------------------------------------------
    def gpu_states(self) -> Dict[int, str]:
        states = gpu_states(self.verdict, self.snapshots)
        for gpu in self.inventory:
            states.setdefault(gpu.index, "healthy")
        return states

    def uuid_of(self, index: int) -> str:
        for item in list(self.snapshots) + list(self.inventory):
            if item.index == index and item.uuid:
                return item.uuid
        return ""

    # -- internals ------------------------------------------------------------------------
    def _evaluate(self, now: float) -> HealthVerdict:
        # The verdict reads only the window's events, the snapshots, the thresholds and the driver
        # version (all immutable values). A second's snapshot of a steady node equals the last one:
        # the verdict is then the same, judged again only for its time.
        windowed = in_window(self.events, now, self.thresholds.window_s)
        inputs = (tuple(windowed), tuple(self.snapshots), self.thresholds, self.driver_version)
        if self._judged is not None and self._judged[0] == inputs:
            # Keep the new inputs: the next comparison then meets the same objects (identity is
            # compared first), not equal copies compared field by field.
            self._judged = (inputs, self._judged[1])
            return replace(self._judged[1], evaluated_at=now)
        verdict = evaluate(events=windowed, snapshots=self.snapshots, thresholds=self.thresholds, now=now,
                           driver_version=self.driver_version)
        self._judged = (inputs, verdict)
        return verdict

    def _prune(self, now: float) -> bool:
        start = now - self.thresholds.window_s
        dropped = False
        while self.events and (self.events[0].timestamp or now) < start:
            self.events.popleft()
            dropped = True
        while self._recent and (self._recent[0].timestamp or now) < now - DUPLICATE_S:
            self._recent.popleft()
        return dropped

    def _replaced(self, event: XidEvent) -> bool:
        if not event.gpu_uuid:
            return False
        for gpu in self.inventory:
            if event.pci_bus_id is not None and gpu.pci_bus_id is not None:
                here = gpu.pci_bus_id == event.pci_bus_id
            else:
                here = event.gpu_index is not None and gpu.index == event.gpu_index
            if here:
                return bool(gpu.uuid) and gpu.uuid != event.gpu_uuid
        return False  # not in the inventory (or none yet): nothing says it was replaced

    def _is_duplicate(self, event: XidEvent) -> bool:
        for seen in self._recent:
            if (seen.source != event.source and seen.xid == event.xid and seen.kind == event.kind
                    and abs((seen.timestamp or 0) - (event.timestamp or 0)) <= DUPLICATE_S and _same_gpu(seen, event)):
                return True
        return False

    def _record(self, kind: str, moment: float, fault: Optional[Fault], source: str, raw: str = "",
                event: Optional[XidEvent] = None) -> HealthEvent:
        if fault is not None:
            detail = fault.to_dict()
            detail["summary"] = describe(fault)
            reason = fault_reason(fault)
        else:  # an XID the verdict did not keep (cannot happen for an in-window event; say so if it does)
            detail = {"xid": event.xid if event else None, "gpu_index": event.gpu_index if event else None,
                      "summary": "XID %s not classified" % (event.xid if event else "?")}
            reason = "Xid%s" % (event.xid if event else "")
        return HealthEvent(time=moment, node=self.node, event=kind, reason=reason, fault=detail,
                           verdict=self.verdict.state, verdict_action=self.verdict.action, source=source, raw=raw)
