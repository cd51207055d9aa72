# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""eBPF observation for the network family: a bpftrace program that counts the packets and bytes an
interface sends and receives while a drill runs.

RDMA (InfiniBand verbs, RoCE) bypasses the kernel's qdiscs, so tc shapes only the TCP/IP traffic of a
fabric or IPoIB interface; what this family brings for the rest is observation. The program attaches
to two tracepoints (this lab's kernel has no kprobes, and tracepoints are a stable ABI anyway):

* ``tracepoint:net:net_dev_xmit`` - a packet handed to the driver (``args->len``: the whole frame);
* ``tracepoint:net:netif_receive_skb`` - a packet entering the stack (``args->len``: without the
  Ethernet header, which the driver has pulled already).

Both carry the device name (``__data_loc char[] name``), so the program keeps only the target's. The
observer runs detached (its own session, output to a file) so that it outlives the module that starts
it; the undo records its PID and start time, and revert or the kill switch stops exactly that process
with SIGINT, on which bpftrace prints its maps. A kernel or a machine that refuses (no bpftrace, no
tracefs, not root, BPF locked down) makes the observation a missing capability, never an error.

The program text, the output parser and the PID check are pure; start/stop are thin I/O.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from typing import Any, Callable, Dict, Mapping, Optional

TRACEFS = "/sys/kernel/tracing"
STATE_DIR = "/run/gpufleet-chaos"
COUNTERS = ("tx_packets", "tx_bytes", "rx_packets", "rx_bytes")
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0

# $1 is the interface name, given on the command line so the program text never embeds input.
PROGRAM = """\
tracepoint:net:net_dev_xmit /str(args->name) == str($1)/ { @tx_packets = count(); @tx_bytes = sum(args->len); }
tracepoint:net:netif_receive_skb /str(args->name) == str($1)/ { @rx_packets = count(); @rx_bytes = sum(args->len); }
"""

_sleep: Callable[[float], None] = time.sleep


# -- pure ------------------------------------------------------------------------------------------
def parse_counts(text: str) -> Dict[str, int]:
    """bpftrace's printed maps (``@tx_bytes: 52568``) -> the four counters; a map never written is 0."""
    counts = {name: 0 for name in COUNTERS}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(":")
        if sep and name.startswith("@") and name[1:] in counts:
            try:
                counts[name[1:]] = int(value.strip())
            except ValueError:
                continue
    return counts


def attached(text: str) -> bool:
    """bpftrace prints ``Attaching 2 probes...`` once its probes are in the kernel."""
    return "Attaching " in text and " probe" in text


def refusal(stderr: str) -> str:
    """The reason bpftrace gave up, without its harmless RLIMIT_MEMLOCK warning."""
    lines = [line for line in stderr.splitlines() if line.strip() and "RLIMIT_MEMLOCK" not in line]
    return "; ".join(lines[-3:]) or "bpftrace exited without a reason"


def paths(tag: str, state_dir: str = STATE_DIR) -> Dict[str, str]:
    base = os.path.join(state_dir, "%s.bpftrace" % tag)
    return {"script": base + ".bt", "out": base + ".out", "err": base + ".err"}


def same_process(stat_text: str, cmdline: str, start_time: str, script: str) -> bool:
    """Is /proc/<pid> still our observer? A PID can be reused: its start time (stat field 22) and its
    command line (the script path names the fault) must both match."""
    return proc_start_time(stat_text) == str(start_time) and script in cmdline


def proc_start_time(stat_text: str) -> str:
    """Field 22 of /proc/<pid>/stat; the command name (field 2) may hold spaces and parentheses."""
    rest = stat_text.rpartition(")")[2].split()
    return rest[19] if len(rest) > 19 else ""


# -- capability ------------------------------------------------------------------------------------
def missing(bpftrace: Optional[str] = None) -> Optional[str]:
    """Why this machine cannot observe, or None. Cheap: it does not load a program."""
    if (bpftrace or shutil.which("bpftrace")) is None:
        return "bpftrace is not installed (Debian/Ubuntu: bpftrace)"
    if os.geteuid() != 0:
        return "bpftrace needs root (CAP_BPF and CAP_PERFMON)"
    if not os.path.isdir(os.path.join(TRACEFS, "events", "net")) and not _mount_tracefs():
        return "tracefs is not mounted on %s and cannot be (mount -t tracefs nodev %s)" % (TRACEFS, TRACEFS)
    return None


def _mount_tracefs() -> bool:
    # Mounting tracefs changes nothing observable for other programs; it stays mounted afterwards.
    done = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True, check=False,
                          stdin=subprocess.DEVNULL)
    return done.returncode == 0 and os.path.isdir(os.path.join(TRACEFS, "events", "net"))


# -- I/O -------------------------------------------------------------------------------------------
def start(tag: str, interface: str, state_dir: str = STATE_DIR) -> Dict[str, Any]:
    """Start the observer on ``interface``; {"pid", "start_time", "script", "out", "err"} once attached,
    or {"missing": why} when this machine refuses."""
    why = missing()
    if why:
        return {"missing": why}
    where = paths(tag, state_dir)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    with open(where["script"], "w") as handle:
        handle.write(PROGRAM)
    with open(where["out"], "wb") as out, open(where["err"], "wb") as err:
        # A session of its own: it outlives the module, and a controller killed with its process
        # group does not take it along (the kill switch stops it by PID).
        proc = subprocess.Popen([shutil.which("bpftrace") or "bpftrace", where["script"], interface],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
    observer = dict(where, pid=proc.pid, start_time=_start_time(proc.pid), interface=interface)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if attached(_read(where["out"])):
            return observer
        if proc.poll() is not None:
            why = refusal(_read(where["err"]))
            _cleanup(where)
            return {"missing": "bpftrace refused: %s" % why}
        _sleep(0.1)
    proc.kill()
    proc.wait()
    _cleanup(where)
    return {"missing": "bpftrace did not attach within %gs" % READY_TIMEOUT_S}


def stop(observer: Mapping[str, Any]) -> Dict[str, Any]:
    """SIGINT our observer (it prints its maps and exits), read the counts, delete its files.
    Idempotent: an observer already gone leaves whatever output it wrote."""
    pid, script = observer.get("pid"), observer.get("script") or ""
    stopped = False
    if pid and _ours(int(pid), str(observer.get("start_time")), script):
        os.kill(int(pid), signal.SIGINT)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _alive(int(pid)) and time.monotonic() < deadline:
            _sleep(0.1)
        if _alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)
        stopped = True
    text = _read(observer.get("out") or "")
    result: Dict[str, Any] = {"stopped": stopped, "pid": pid}
    if text:
        result["counts"] = parse_counts(text)
    _cleanup(observer)
    return result


def find_orphan(tag: str, state_dir: str = STATE_DIR) -> Optional[Dict[str, Any]]:
    """An observer whose PID never reached the ledger (inject died right after starting it): the
    process whose command line names this fault's script."""
    where = paths(tag, state_dir)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        cmdline = _read("/proc/%s/cmdline" % name).replace("\0", " ")
        if where["script"] in cmdline and "bpftrace" in cmdline:
            return dict(where, pid=int(name), start_time=_start_time(int(name)))
    return dict(where) if os.path.exists(where["out"]) else None


def _ours(pid: int, start_time: str, script: str) -> bool:
    return same_process(_read("/proc/%d/stat" % pid), _read("/proc/%d/cmdline" % pid).replace("\0", " "),
                        start_time, script)


def _alive(pid: int) -> bool:
    # Our child only while the starting module lives; reap it if so, else /proc tells.
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    stat = _read("/proc/%d/stat" % pid)
    return bool(stat) and stat.rpartition(")")[2].split()[:1] != ["Z"]


def _start_time(pid: int) -> str:
    return proc_start_time(_read("/proc/%d/stat" % pid))


def _read(path: str) -> str:
    if not path:
        return ""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _cleanup(where: Mapping[str, Any]) -> None:
    for key in ("script", "out", "err"):
        with contextlib.suppress(OSError):
            os.unlink(where.get(key) or "")
