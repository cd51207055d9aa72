# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The fault journal: what a restarted agent must not forget.

XID faults such as 48, 79, 94, 95 or 119 leave nothing in NVML's counters; the agent's XID
history is the only place they live. This file keeps that history (and where the kernel-log
reader was) across agent restarts - an upgrade, an OOM kill, a DaemonSet rollout - so that an
unresolved fault is still fatal after the agent comes back.

One JSON document beside the health-event journal (``<journal>.state.json``)::

    {"version": 1, "node": "gpu-a-001", "boot_id": "...", "written": 1764640000.0,
     "events": [{"xid": 48, "source": "nvml", "gpu_index": 3, "gpu_uuid": "GPU-...", ...}],
     "kernel_log": {"kind": "file", "path": "...", "dev": 2049, "inode": 1234, "offset": 5678}}

Rules, applied when the agent starts (``restore``):

* only within the same boot (``/proc/sys/kernel/random/boot_id``): a reboot resets the GPUs;
* only events still inside the fault window (``thresholds.window_s``);
* a SIGUSR1 (GPU reset) empties the events, and the file is rewritten at once;
* a GPU replaced while the agent was down (another UUID at the event's PCI address or index) drops
  that GPU's events (``NodeState.drop_replaced``).

The document is written whole to a temporary file in the same directory, flushed to disk and
renamed over the old one, so a crash at any moment leaves the old document or the new one, never
a mix. A document that cannot be read or parsed raises ``FaultJournalError`` (the agent logs it
with the path and starts clean). It is bounded: the newest ``MAX_EVENTS`` events, and the long
text fields of each cut to ``MAX_TEXT`` characters.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import XidEvent

VERSION = 1
MODE = 0o640
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# The verdict's repeat thresholds count a handful of events per GPU; 512 keeps every one of them
# for 8 GPUs and bounds the file to a few hundred KiB in an XID storm.
MAX_EVENTS = 512
MAX_TEXT = 512
_TEXT_FIELDS = ("message", "raw")
_EVENT_FIELDS = {item.name for item in fields(XidEvent)}


class FaultJournalError(GpufleetError):
    """The fault journal exists but cannot be read or is not a journal this agent wrote."""


def state_path(journal: str) -> str:
    """``/var/lib/gpufleet/health-events.jsonl`` -> ``/var/lib/gpufleet/health-events.state.json``."""
    base = journal[:-len(".jsonl")] if journal.endswith(".jsonl") else journal
    return base + ".state.json"


def read_boot_id(path: str = BOOT_ID_PATH) -> Optional[str]:
    """This boot's id, or None where the kernel does not say (then nothing is restored)."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


# -- events <-> JSON -------------------------------------------------------------------------
def event_to_dict(event: XidEvent) -> Dict[str, Any]:
    data = {key: value for key, value in event.to_dict().items() if value is not None and value != ""}
    for name in _TEXT_FIELDS:
        if name in data:
            data[name] = str(data[name])[:MAX_TEXT]
    return data


def event_from_dict(data: Any) -> XidEvent:
    """An ``XidEvent`` from its JSON form; ``ValueError`` for anything that is not one."""
    if not isinstance(data, Mapping):
        raise ValueError("an event is not an object: %r" % (data,))
    known = {key: value for key, value in data.items() if key in _EVENT_FIELDS}
    xid = known.get("xid")
    if isinstance(xid, bool) or not isinstance(xid, int):
        raise ValueError("an event without an integer xid: %r" % (data,))
    if not isinstance(known.get("source"), str) or not isinstance(known.get("timestamp"), (int, float)):
        raise ValueError("an event without source or timestamp: %r" % (data,))
    for name in ("gpu_index", "pid", "gpu_instance", "compute_instance"):
        value = known.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError("%s is not an integer: %r" % (name, value))
    for name in ("kind", "pci_bus_id", "gpu_uuid", "message", "process_name", "raw"):
        value = known.get(name)
        if value is not None and not isinstance(value, str):
            raise ValueError("%s is not a string: %r" % (name, value))
    return XidEvent(**known)


# -- the document ----------------------------------------------------------------------------
def document(node: str, boot_id: Optional[str], events: Sequence[XidEvent], kernel_log: Optional[Mapping[str, Any]],
             now: float) -> Dict[str, Any]:
    """The JSON document for these events (the newest ``MAX_EVENTS``) and kernel-log position."""
    newest = sorted(events, key=lambda event: event.timestamp or 0.0)[-MAX_EVENTS:]
    return {"version": VERSION, "node": node, "boot_id": boot_id, "written": now,
            "events": [event_to_dict(event) for event in newest],
            "kernel_log": dict(kernel_log) if kernel_log else None}


def write(path: str, content: Mapping[str, Any]) -> None:
    """Replace the journal atomically: a temporary file, fsync, rename, fsync of the directory.

    OSError propagates (the agent counts it and goes on); the temporary file never stays behind.
    """
    data = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o750, exist_ok=True)
    temporary = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, MODE)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    try:  # the rename itself survives a power cut only once the directory is on disk
        dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def read(path: str) -> Optional[Dict[str, Any]]:
    """The document, None when there is none; ``FaultJournalError`` (naming the path) when unusable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FaultJournalError("%s: cannot read: %s" % (path, exc.strerror or exc)) from exc
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FaultJournalError("%s: not a fault journal (bad JSON): %s" % (path, exc)) from exc
    if not isinstance(content, dict) or content.get("version") != VERSION:
        raise FaultJournalError("%s: not a version %d fault journal" % (path, VERSION))
    if not isinstance(content.get("events", []), list):
        raise FaultJournalError("%s: events is not a list" % path)
    return content


@dataclass
class Restored:
    """What ``restore`` keeps, and why it dropped the rest (counts by reason)."""

    events: List[XidEvent] = field(default_factory=list)
    kernel_log: Optional[Dict[str, Any]] = None
    dropped: Dict[str, int] = field(default_factory=dict)
    cleared_by: str = ""  # "no journal", "new boot", "another node" when nothing carries over


def restore(content: Optional[Mapping[str, Any]], node: str, boot_id: Optional[str], now: float,
            window_s: float, path: str = "") -> Restored:
    """Apply the boot and window rules to a read document. ``FaultJournalError`` for bad events."""
    if content is None:
        return Restored(cleared_by="no journal")
    if content.get("node") != node:
        return Restored(cleared_by="another node")
    if boot_id is None or content.get("boot_id") != boot_id:
        return Restored(cleared_by="new boot", dropped={"new_boot": len(content.get("events") or [])})
    restored = Restored()
    position = content.get("kernel_log")
    restored.kernel_log = dict(position) if isinstance(position, Mapping) else None
    start = now - window_s
    for raw in content.get("events") or []:
        try:
            event = event_from_dict(raw)
        except (TypeError, ValueError) as exc:
            raise FaultJournalError("%s: %s" % (path or "fault journal", exc)) from exc
        if (event.timestamp or 0.0) < start:
            restored.dropped["expired"] = restored.dropped.get("expired", 0) + 1
            continue
        restored.events.append(event)
    restored.events.sort(key=lambda event: event.timestamp or 0.0)
    return restored
