# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Who is running a remediation, and whether it still is.

A second alert for a node already in remediation must not start a second run, but a run that was
killed must be resumable at once, without waiting out a timeout. So a remediation records its
*holder*: the ``ansible-playbook`` process that runs it (host, PID and the process's start time,
which tells a reused PID apart). On the same host a holder is alive while that process is; from
another host (AWX, a second controller) it is alive while it renewed its lease in the last
``lease_s`` seconds (every phase renews it).

The first responder (``first_responder.py``) is a long-running process, not a playbook: it holds a
remediation while it fences and quarantines the node, then *hands it off* (holder
``{"handoff": ...}``, which is nobody alive), so that the playbook the trigger starts takes it over
at once, as the next run and not as a crash's resume.
"""

from __future__ import annotations

import os
import socket
from typing import Any, Dict, Mapping, Optional


def _stat(pid: int) -> Optional[list]:
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def start_time(pid: int) -> Optional[str]:
    fields = _stat(pid)
    # Field 22 of /proc/PID/stat (index 19 after the command name): start time in clock ticks.
    return fields[19] if fields and len(fields) > 19 else None


def controller_pid(pid: Optional[int] = None) -> int:
    """The outermost ``ansible-playbook`` above ``pid`` (a module runs in a forked worker of it),
    or the parent of this process when there is none (a test calling the code directly)."""
    pid = os.getpid() if pid is None else pid
    found = None
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        if "ansible-playbook" in _cmdline(pid):
            found = pid
        fields = _stat(pid)
        if not fields:
            break
        pid = int(fields[1])
    return found or os.getppid()


FIRST_RESPONDER = "first-responder"
# Set once by a long-running process that acts for itself (the first responder): its own PID holds
# what it claims, whatever its parent is.
_PROCESS_ROLE: Dict[str, Any] = {}


def hold_as(role: str, pid: Optional[int] = None) -> None:
    """Make this process, under ``role``, the holder of what it claims from now on."""
    _PROCESS_ROLE.clear()
    _PROCESS_ROLE.update(role=role, pid=os.getpid() if pid is None else pid)


def current(now: float, pid: Optional[int] = None) -> Dict[str, Any]:
    if pid is None and _PROCESS_ROLE:
        pid = _PROCESS_ROLE["pid"]
    holder_pid = controller_pid() if pid is None else pid
    found = {"host": socket.gethostname(), "pid": holder_pid, "start": start_time(holder_pid), "renewed": now}
    if _PROCESS_ROLE:
        found["role"] = _PROCESS_ROLE["role"]
    return found


def handed_off(by: str, now: float) -> Dict[str, Any]:
    """The holder of a remediation handed off: nobody alive, so the next run takes it over at once."""
    return {"handoff": by, "at": now}


def is_handoff(holder: Optional[Mapping[str, Any]]) -> bool:
    return bool(holder and holder.get("handoff"))


def is_first_responder(holder: Optional[Mapping[str, Any]]) -> bool:
    return bool(holder and holder.get("role") == FIRST_RESPONDER)


def alive(
    holder: Optional[Mapping[str, Any]], now: float, lease_s: float, me: Optional[Mapping[str, Any]] = None
) -> bool:
    """Whether the holder still runs; a holder that is this very run counts as not alive (it is us)."""
    if not holder or is_handoff(holder):
        return False
    if (
        me
        and holder.get("host") == me.get("host")
        and holder.get("pid") == me.get("pid")
        and holder.get("start") == me.get("start")
    ):
        return False
    if holder.get("host") == socket.gethostname():
        pid = holder.get("pid")
        return isinstance(pid, int) and start_time(pid) is not None and start_time(pid) == holder.get("start")
    return now - float(holder.get("renewed") or 0) < lease_s
