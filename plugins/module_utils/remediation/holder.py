# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Who is running a remediation, and whether it still is.

A second alert for a node already in remediation must not start a second run, but a run that was
killed must be resumable at once, without waiting out a timeout. So a remediation records its
*holder*: the ``ansible-playbook`` process that runs it (host, PID and the process's start time,
which tells a reused PID apart). On the same host a holder is alive while that process is; from
another host (AWX, a second controller) it is alive while it renewed its lease in the last
``lease_s`` seconds (every phase renews it).
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


def current(now: float, pid: Optional[int] = None) -> Dict[str, Any]:
    holder_pid = controller_pid() if pid is None else pid
    return {"host": socket.gethostname(), "pid": holder_pid, "start": start_time(holder_pid), "renewed": now}


def alive(
    holder: Optional[Mapping[str, Any]], now: float, lease_s: float, me: Optional[Mapping[str, Any]] = None
) -> bool:
    """Whether the holder still runs; a holder that is this very run counts as not alive (it is us)."""
    if not holder:
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
