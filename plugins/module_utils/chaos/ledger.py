# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The chaos ledger: every active fault with its expiry and undo, the active drills, the kill switch.

It lives where a killed controller cannot lose it: the ConfigMap gpufleet-system/gpufleet-chaos-ledger
(changed by compare-and-swap, kube/configmap_store.py), or a JSON file on the control host for bare
metal (changed under flock). A fault is written as ``injecting`` *before* the injection and as
``active`` with its undo after it, so a crash in between still leaves a record that rollback acts on.
Each fault records the host it was injected on (``host``); a fault that acts on the node's own host
(``on_host``) is rolled back only there (api.revert_here).
Rolled-back faults move to ``history`` (the last HISTORY_KEEP), which also gives the
rollback-completeness figure: faults injected against faults rolled back.

The functions on ``data`` are pure (the ConfigMap's data: key -> JSON text).
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError

LEDGER_NAME = "gpufleet-chaos-ledger"
HISTORY_KEEP = 200

Data = Dict[str, str]


def _get(data: Data, key: str, default: Any) -> Any:
    return json.loads(data[key]) if key in data else default


def _put(data: Data, key: str, value: Any) -> Data:
    updated = dict(data)
    updated[key] = json.dumps(value, sort_keys=True)
    return updated


def faults(data: Data) -> Dict[str, Dict[str, Any]]:
    return _get(data, "faults", {})


def drills(data: Data) -> Dict[str, Dict[str, Any]]:
    return _get(data, "drills", {})


def history(data: Data) -> List[Dict[str, Any]]:
    return _get(data, "history", [])


def kill_switch(data: Data) -> Dict[str, Any]:
    return _get(data, "kill_switch", {"on": False})


def add_drill(data: Data, drill: Dict[str, Any]) -> Data:
    current = drills(data)
    current[drill["id"]] = drill
    return _put(data, "drills", current)


def remove_drill(data: Data, drill_id: str) -> Data:
    current = drills(data)
    current.pop(drill_id, None)
    return _put(data, "drills", current)


def remove_drills(data: Data) -> Data:
    return _put(data, "drills", {})


def end_if_empty(data: Data, drill_id: str, now: float) -> Optional[Data]:
    """End a drill whose expiry passed with no fault in the ledger; None (nothing to write) when it
    is gone, not expired, or has a fault. Decided on the data the compare-and-swap write replaces, so
    a fault its controller adds in the meantime keeps the drill (add_drill_fault is the other side)."""
    drill = drills(data).get(drill_id)
    if drill is None or drill.get("expires_at", now) > now:
        return None
    if any(f.get("drill") == drill_id for f in faults(data).values()):
        return None
    return remove_drill(data, drill_id)


def add_drill_fault(data: Data, entry: Dict[str, Any]) -> Optional[Data]:
    """Write a drill's fault before it is injected (add_fault); None when the drill is no longer
    registered (ended at its expiry by a watchdog or the warden, or by the kill switch): nothing may
    be injected for it. The drill's expiry becomes its faults' latest: until the first injection it
    also allowed for the time to get there (api.INJECT_WITHIN_S)."""
    drill = drills(data).get(entry["drill"])
    if drill is None:
        return None
    armed = bool(drill.get("armed"))
    expires_at = max(entry["expires_at"], drill["expires_at"]) if armed else entry["expires_at"]
    return add_fault(add_drill(data, dict(drill, expires_at=expires_at, armed=True)), entry)


def add_fault(data: Data, entry: Dict[str, Any]) -> Data:
    current = faults(data)
    current[entry["id"]] = dict(entry, state="injecting")
    return _put(data, "faults", current)


def activate(data: Data, fault_id: str, undo: Dict[str, Any], now: float) -> Data:
    current = faults(data)
    if fault_id not in current:
        raise GpufleetError("fault %s is not in the chaos ledger" % fault_id)
    current[fault_id] = dict(current[fault_id], state="active", undo=undo, injected_at=now)
    return _put(data, "faults", current)


def record_attempt(data: Data, fault_id: str, error: str, now: float) -> Data:
    """A rollback that failed: the fault stays in the ledger (state ``rollback_failed``) for the next try."""
    current = faults(data)
    if fault_id in current:
        current[fault_id] = dict(current[fault_id], state="rollback_failed", error=error, last_attempt=now)
    return _put(data, "faults", current)


def finish(data: Data, fault_id: str, how: str, now: float, reverted: Optional[List[str]] = None,
           observed: Optional[Dict[str, Any]] = None) -> Data:
    """The fault is rolled back: out of the active set, into history (with what its family observed,
    for the report of a drill whose rollback ran on the fault's own host)."""
    current = faults(data)
    entry = current.pop(fault_id, None)
    if entry is None:
        return data
    kept = ("id", "drill", "experiment", "node", "backend", "host", "injected_at", "expires_at")
    done = {k: entry.get(k) for k in kept}
    done.update(rolled_back_at=now, rolled_back_by=how, reverted=list(reverted or []))
    if observed:
        done["observed"] = observed
    updated = _put(data, "faults", current)
    return _put(updated, "history", [*history(data), done][-HISTORY_KEEP:])


def set_kill_switch(data: Data, on: bool, by: str, why: str, now: float) -> Data:
    return _put(data, "kill_switch", {"on": on, "by": by, "why": why, "at": now})


def expired(data: Data, now: float, drill_id: Optional[str] = None) -> List[Dict[str, Any]]:
    return [f for f in faults(data).values()
            if f.get("expires_at", 0) <= now and (drill_id is None or f.get("drill") == drill_id)]


def active_on(data: Data, nodes: List[str]) -> List[Dict[str, Any]]:
    """Faults and drills that touch any of ``nodes``."""
    wanted = set(nodes)
    found = [dict(f, kind="fault") for f in faults(data).values() if f.get("node") in wanted]
    found += [dict(d, kind="drill") for d in drills(data).values() if wanted & set(d.get("targets") or [])]
    return found


def completeness(data: Data) -> Dict[str, int]:
    done = history(data)
    return {"rolled_back": len(done), "still_active": len(faults(data)),
            "by_watchdog": sum(1 for f in done if f.get("rolled_back_by") == "expiry"),
            "by_kill_switch": sum(1 for f in done if f.get("rolled_back_by") == "kill_switch")}


class FileStore:
    """The ConfigMapStore interface (read / update(change, write)) on a JSON file, for bare metal."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> Tuple[Data, Optional[str]]:
        try:
            with open(self.path) as handle:
                return dict(json.load(handle)), "file"
        except FileNotFoundError:
            return {}, None
        except ValueError as exc:
            raise GpufleetError("the chaos ledger %s is not valid JSON: %s" % (self.path, exc)) from exc

    def update(self, change: Callable[[Data], Tuple[Optional[Data], Any]], write: bool = True) -> Any:
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data, _version = self.read()
            new_data, answer = change(dict(data))
            if write and new_data is not None and new_data != data:
                tmp = "%s.%d.tmp" % (self.path, os.getpid())
                with open(tmp, "w") as handle:
                    json.dump(new_data, handle, sort_keys=True, indent=1)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self.path)
            return answer
