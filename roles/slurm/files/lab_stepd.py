# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Find and stop the lab's leftover slurmstepd processes by PID.

slurmstepd daemonizes (own session, parent init), so stopping a slurmd leaves
its steps running, and a lab_process record never covers them. Each step
daemon listens on a Unix socket ``<SlurmdSpoolDir>/<node>_<job>.<step>``; that
socket is how we find it:

1. every socket file under the given spool directories;
2. its inode, from ``/proc/net/unix``;
3. the process holding that inode open, from ``/proc/<pid>/fd`` — checked to
   run the slurmstepd executable, so a stray socket never leads us to a
   stranger;
4. the job's processes: the step daemon's session and descendants.

``stop`` sends SIGTERM to the job's processes (a job such as train_sim saves a
checkpoint then), waits ``--grace`` seconds, SIGKILLs what is left, then
SIGKILLs the step daemon, which ignores SIGTERM. Nothing is looked up by
process name. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import stat
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class ProcessId:
    pid: int
    start_time: str


@dataclass
class StepDaemon:
    socket: str
    pid: int
    start_time: str
    job_pids: list[int] = field(default_factory=list)


def proc_stat(pid: int) -> Optional[list[str]]:
    """Fields of /proc/PID/stat from field 3 (state) on; None when gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields


def identity(pid: int) -> Optional[ProcessId]:
    fields = proc_stat(pid)
    return ProcessId(pid, fields[19]) if fields else None


def socket_files(spool_dirs: list[Path]) -> list[Path]:
    found = []
    for spool in spool_dirs:
        # /proc/net/unix holds the absolute path each socket was bound to.
        spool = Path(os.path.abspath(spool))
        if not spool.is_dir():
            continue
        for path in sorted(spool.rglob("*")):
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    found.append(path)
    return found


def unix_socket_inodes(paths: list[Path]) -> dict[str, str]:
    """Bound path -> socket inode, from /proc/net/unix."""
    wanted = {str(path) for path in paths}
    inodes = {}
    with open("/proc/net/unix") as table:
        next(table, None)
        for line in table:
            parts = line.split()
            if len(parts) >= 8 and parts[7] in wanted:
                inodes[parts[7]] = parts[6]
    return inodes


def socket_holders(inodes: set[str]) -> dict[str, int]:
    """Socket inode -> PID of a process that has it open."""
    holders: dict[str, int] = {}
    targets = {f"socket:[{inode}]": inode for inode in inodes}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    inode = targets.get(os.readlink(f"/proc/{entry}/fd/{fd}"))
                    if inode is not None:
                        holders.setdefault(inode, int(entry))
    return holders


def job_processes(stepd_pid: int) -> list[int]:
    """Processes in the step daemon's session or below it, except the daemon itself."""
    fields = proc_stat(stepd_pid)
    if fields is None:
        return []
    session = fields[3]
    parent_of: dict[int, int] = {}
    in_session = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        other = proc_stat(int(entry))
        if other is None:
            continue
        parent_of[int(entry)] = int(other[1])
        if other[3] == session:
            in_session.add(int(entry))
    below = set()
    frontier = {stepd_pid}
    while frontier:
        frontier = {pid for pid, parent in parent_of.items() if parent in frontier} - below
        below |= frontier
    return sorted((in_session | below) - {stepd_pid})


def find_step_daemons(spool_dirs: list[Path], stepd_exe: str) -> list[StepDaemon]:
    sockets = socket_files(spool_dirs)
    inodes = unix_socket_inodes(sockets)
    holders = socket_holders(set(inodes.values()))
    wanted_exe = os.path.realpath(stepd_exe)
    daemons = {}
    for path, inode in sorted(inodes.items()):
        pid = holders.get(inode)
        if pid is None or pid in daemons:
            continue
        try:
            exe = os.path.realpath(f"/proc/{pid}/exe")
        except OSError:
            continue
        ident = identity(pid)
        if exe != wanted_exe or ident is None:
            continue
        daemons[pid] = StepDaemon(socket=path, pid=pid, start_time=ident.start_time, job_pids=job_processes(pid))
    return list(daemons.values())


def _signal(process: ProcessId, signum: int) -> None:
    # Re-check the start time right before signalling: the PID may have been reused.
    if identity(process.pid) == process:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signum)


def _wait_gone(processes: list[ProcessId], timeout: float) -> list[ProcessId]:
    deadline = time.monotonic() + timeout
    alive = processes
    while True:
        alive = [process for process in alive if identity(process.pid) == process]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def stop_step_daemons(daemons: list[StepDaemon], grace: float) -> None:
    jobs = [ident for d in daemons for ident in map(identity, d.job_pids) if ident is not None]
    for process in jobs:
        _signal(process, signal.SIGTERM)
    for process in _wait_gone(jobs, grace):
        _signal(process, signal.SIGKILL)
    stepds = [ProcessId(d.pid, d.start_time) for d in daemons]
    for process in stepds:
        _signal(process, signal.SIGKILL)
    left = _wait_gone(stepds + jobs, 5)
    if left:
        raise RuntimeError("still alive after SIGKILL: " + ", ".join(str(p.pid) for p in left))
    for daemon in daemons:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(daemon.socket)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="lab_stepd", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("action", choices=["list", "stop"])
    parser.add_argument(
        "--spool-dir",
        action="append",
        type=Path,
        required=True,
        help="a SlurmdSpoolDir, or a directory above several (searched recursively)",
    )
    parser.add_argument("--stepd-exe", default="/usr/sbin/slurmstepd", help="the slurmstepd executable")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL for jobs")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    daemons = find_step_daemons(args.spool_dir, args.stepd_exe)
    if args.action == "stop" and daemons:
        stop_step_daemons(daemons, args.grace)
    json.dump({"action": args.action, "step_daemons": [asdict(d) for d in daemons]}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
