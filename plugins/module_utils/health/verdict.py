# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""One verdict per node from its XID events and NVML snapshots. Pure.

* Window: events stamped (wall clock) more than ``window_s`` before ``now`` are left out.
  ``now`` defaults to the newest stamp among the events, so the result depends on the
  input alone. Events without a wall-clock stamp are always in the window: nothing says
  they are old, and dropping a fault is worse than keeping it.
* Classification and repeat escalation: ``xid_rules.classify``; NVML counters:
  ``xid_rules.faults_from_snapshot``.
* State: ``fatal`` if any effective fault is fatal, ``degraded`` if any effective fault
  remains, else ``healthy``. A fault is effective unless its action is IGNORE; IGNOREd
  faults (XID 45 next to another XID, XID 43/63, decoded-benign NVLink5 errors, XID 154
  "to 0x0 (None)") stay in ``faults`` so the audit shows what was seen and why it did not count.
* Action: the most severe action of the effective faults, fatal faults first, then by
  ``model.ACTION_ORDER``. ``NONE`` when there is no fault at all, ``IGNORE`` when every
  fault is ignored.
* Reason: one short sentence per effective fault, worst first, naming the GPU.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    ACTION_RANK,
    NO_ACTION,
    Fault,
    GpuSnapshot,
    HealthVerdict,
    Thresholds,
    XidEvent,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import CATALOG_VERSION
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_rules import (
    DEFAULT_THRESHOLDS,
    classify,
    fault_sort_key,
    faults_from_snapshot,
)

# A long list of faults helps nobody in a one-line reason; the faults list has them all.
REASON_MAX_FAULTS = 4


def in_window(events: Sequence[XidEvent], now: Optional[float], window_s: float) -> List[XidEvent]:
    """Events of the window ending at ``now``; unstamped events are always in it."""
    if now is None:
        return list(events)
    start = now - window_s
    return [event for event in events if event.timestamp is None or event.timestamp >= start]


def device_label(fault: Fault) -> str:
    """``GPU 3 (GPU-..., 0000:3b:00.0)``, ``NVSwitch 0000:05:00.0``, or ``node`` when unattributed."""
    if fault.kind == "sxid":
        return "NVSwitch %s" % (fault.pci_bus_id or "(unknown PCI id)")
    names = [name for name in (fault.gpu_uuid, fault.pci_bus_id) if name]
    if fault.gpu_index is not None:
        return "GPU %d" % fault.gpu_index + (" (%s)" % ", ".join(names) if names else "")
    if names:
        return "GPU %s" % ", ".join(names)
    return "node (GPU not identified)"


def describe(fault: Fault) -> str:
    if fault.xid is not None:
        what = "%s %d %s" % ("SXID" if fault.kind == "sxid" else "XID", fault.xid, fault.description or fault.name)
    else:
        what = "%s (%s)" % (fault.name, fault.message)
    repeats = " (x%d)" % fault.count if fault.count > 1 else ""
    severity = "" if fault.severity == "fatal" else " [non-fatal]"
    return "%s: %s%s -> %s%s" % (device_label(fault), what, repeats, fault.action, severity)


def _reason(effective: Sequence[Fault], ignored: Sequence[Fault]) -> str:
    if not effective:
        if ignored:
            return "healthy: %d fault(s) seen and ignored by the catalog rules (%s)" % (
                len(ignored), ", ".join(sorted({"XID %d" % f.xid if f.xid is not None else f.name for f in ignored})))
        return "healthy: no GPU fault"
    parts = [describe(fault) for fault in effective[:REASON_MAX_FAULTS]]
    if len(effective) > REASON_MAX_FAULTS:
        parts.append("and %d more" % (len(effective) - REASON_MAX_FAULTS))
    return "; ".join(parts)


def evaluate(
    events: Sequence[XidEvent] = (),
    snapshots: Sequence[GpuSnapshot] = (),
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    now: Optional[float] = None,
    driver_version: Optional[str] = None,
) -> HealthVerdict:
    """Fold a node's XID events and GPU snapshots into one verdict.

    ``driver_version`` (e.g. "575.51.03", what NVML reports) picks the NVLink5 decode
    column for XIDs 144-150; without it a decode the columns disagree on is "ambiguous".
    """
    thresholds.validate()
    events = list(events or ())
    snapshots = list(snapshots or ())
    if now is None:
        stamps = [event.timestamp for event in events if event.timestamp is not None]
        now = max(stamps) if stamps else None
    windowed = in_window(events, now, thresholds.window_s)
    faults = classify(windowed, thresholds, gpus=snapshots, driver_version=driver_version)
    for snapshot in snapshots:
        faults.extend(faults_from_snapshot(snapshot, thresholds))
    faults.sort(key=fault_sort_key)

    effective = [fault for fault in faults if fault.effective]
    ignored = [fault for fault in faults if not fault.effective]
    if any(fault.severity == "fatal" for fault in effective):
        state = "fatal"
    elif effective:
        state = "degraded"
    else:
        state = "healthy"
    if effective:
        action = max(effective, key=lambda f: (f.severity == "fatal", ACTION_RANK.get(f.action, 0))).action
    else:
        action = "IGNORE" if ignored else NO_ACTION
    return HealthVerdict(
        state=state, action=action, reason=_reason(effective, ignored), faults=tuple(faults),
        evaluated_at=now, events_considered=len(windowed), catalog_version=CATALOG_VERSION,
    )
