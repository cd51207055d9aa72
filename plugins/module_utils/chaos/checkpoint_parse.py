# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The checkpoint family's parsers and arithmetic, pure (the I/O is ``checkpoint.py``): train_sim's
output events and whether a save is in progress, /proc/<pid>/mountinfo and which mount holds a path,
how many bytes a fill allocates, and the lines of cgroup v2 ``io.max``. Tested without a kernel.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

_RATE = re.compile(r"([0-9]+)([KMGT]?)")
_DEVICE = re.compile(r"[0-9]+:[0-9]+")
IO_MAX_CLEAR = "rbps=max wbps=max riops=max wiops=max"


# -- train_sim's output ----------------------------------------------------------------------------
def parse_event(line: str) -> Optional[Dict[str, Any]]:
    """``checkpoint_begin time=1.5 step=10 file=x`` -> {"event": "checkpoint_begin", "time": 1.5, "step": 10,
    "file": "x"}; None for a line that is not a train_sim event. ``step`` is an int, ``time`` a float."""
    words = line.split()
    if not words or "=" in words[0] or not re.fullmatch(r"[a-z][a-z_]*", words[0]):
        return None
    event: Dict[str, Any] = {"event": words[0]}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or not key:
            return None
        event[key] = value
    try:
        if "step" in event:
            event["step"] = int(event["step"])
        if "time" in event:
            event["time"] = float(event["time"])
    except ValueError:
        return None
    return event


def parse_events(text: str, names: Optional[Tuple[str, ...]] = None) -> List[Dict[str, Any]]:
    """Every train_sim event in ``text`` (a whole output file), optionally only those named."""
    found = []
    for line in text.splitlines():
        event = parse_event(line)
        if event is not None and (names is None or event["event"] in names):
            found.append(event)
    return found


class SaveTracker:
    """Follows a job's output line by line: is a save in progress, which checkpoint was the last good one."""

    def __init__(self) -> None:
        self.in_progress: Optional[int] = None  # the step a started save is writing
        self.last_saved: Optional[int] = None
        self.finished: Dict[int, str] = {}  # step -> "checkpoint" | "checkpoint_failed"
        self.ended: Optional[str] = None  # "done" / "error" / "interrupted": this run of the job is over

    def feed(self, event: Dict[str, Any]) -> None:
        name, step = event["event"], event.get("step")
        if name == "checkpoint_begin":
            self.in_progress, self.ended = step, None
        elif name in ("checkpoint", "checkpoint_failed"):
            if step is not None:
                self.finished[step] = name
            if name == "checkpoint":
                self.last_saved = step
            if step == self.in_progress:
                self.in_progress = None
        elif name in ("start", "resume"):
            self.in_progress, self.ended = None, None
            if name == "resume":
                self.last_saved = step
        elif name in ("done", "error", "interrupted"):
            self.in_progress, self.ended = None, name


def save_in_progress(text: str) -> Optional[int]:
    """The step whose ``checkpoint_begin`` has no ``checkpoint``/``checkpoint_failed`` after it yet, or None."""
    tracker = SaveTracker()
    for event in parse_events(text):
        tracker.feed(event)
    return tracker.in_progress


# -- mounts ----------------------------------------------------------------------------------------
def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def parse_mountinfo(text: str) -> List[Dict[str, Any]]:
    """The lines of /proc/<pid>/mountinfo (proc(5)) as dicts, in the kernel's order."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 3:
            continue
        mounts.append({
            "mount_id": int(fields[0]),
            "parent_id": int(fields[1]),
            "device": fields[2],
            "root": _unescape(fields[3]),
            "mount_point": _unescape(fields[4]),
            "options": fields[5].split(","),
            "fstype": fields[dash + 1],
            "source": _unescape(fields[dash + 2]),
            "super_options": fields[dash + 3].split(",") if len(fields) > dash + 3 else [],
        })
    return mounts


def mount_for(path: str, mounts: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The mount that holds ``path`` (absolute, symlinks resolved): the longest mount point that
    prefixes it; of mounts stacked on one point, the last listed (the one on top)."""
    best: Optional[Dict[str, Any]] = None
    for mount in mounts:
        point = mount["mount_point"]
        holds = path == point or path.startswith(point.rstrip("/") + "/")
        if holds and (best is None or len(point) >= len(best["mount_point"])):
            best = mount
    return best


def stacked(point: str, mounts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Every mount on exactly ``point``, bottom first."""
    return [mount for mount in mounts if mount["mount_point"] == point]


def read_only(mount: Mapping[str, Any]) -> bool:
    return "ro" in mount["options"] or "ro" in mount["super_options"]


# -- fill arithmetic -------------------------------------------------------------------------------
def below(free: int, leave_bytes: int) -> bool:
    """Is the volume filled? Fewer than ``leave_bytes`` free, or nothing at all when ``leave_bytes`` is 0."""
    return free < leave_bytes or free == 0


def fill_size(free: int, leave_bytes: int, block: int) -> int:
    """Bytes to allocate so that fewer than ``leave_bytes`` stay free, on a filesystem of ``block``-byte blocks.

    Space goes in whole blocks, so what is left is the largest multiple of ``block`` under
    ``leave_bytes`` (0 when ``leave_bytes`` is 0 or less than one block).
    """
    block = max(1, int(block))
    if below(free, leave_bytes):
        return 0
    left = max(0, -(-leave_bytes // block) * block - block)
    return max(0, free - left)


def free_bytes(stat: Any) -> int:
    """Free space for any writer, root included (root may use the blocks ext4 reserves)."""
    return int(stat.f_bfree) * int(stat.f_frsize)


# -- io.max ----------------------------------------------------------------------------------------
def parse_rate(value: Any, field: str) -> Optional[str]:
    """A byte rate for io.max: an int, ``"max"``, or ``"10M"`` (K, M, G, T: powers of 1024); None when unset."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise FieldError(field, "must be bytes per second (an integer, 10M, or max), not %r" % (value,))
    if isinstance(value, int):
        if value < 1:
            raise FieldError(field, "must be at least 1 byte per second, not %d" % value)
        return str(value)
    text = str(value).strip().upper()
    if text == "MAX":
        return "max"
    match = _RATE.fullmatch(text)
    if not match:
        raise FieldError(field, "must be bytes per second (an integer, 10M, or max), not %r" % (value,))
    number = int(match.group(1)) * 1024 ** " KMGT".index(match.group(2) or " ")
    if number < 1:
        raise FieldError(field, "must be at least 1 byte per second, not %r" % (value,))
    return str(number)


def io_limits(rbps: Optional[str], wbps: Optional[str]) -> str:
    """``rbps=1048576 wbps=max``: a limit not given here stays as it was (io.max takes the keys given)."""
    parts = []
    if rbps is not None:
        parts.append("rbps=%s" % rbps)
    if wbps is not None:
        parts.append("wbps=%s" % wbps)
    if not parts:
        raise FieldError("params.rbps", "mode slow needs rbps, wbps or both")
    return " ".join(parts)


def io_max_line(device: str, rbps: Optional[str], wbps: Optional[str]) -> str:
    """``8:0 rbps=1048576 wbps=max``, the line written into io.max."""
    if not _DEVICE.fullmatch(device or ""):
        raise FieldError("device", "must be MAJ:MIN, not %r" % (device,))
    return "%s %s" % (device, io_limits(rbps, wbps))


def parse_io_max(text: str) -> Dict[str, str]:
    """io.max's lines by device: {"8:0": "8:0 rbps=1048576 wbps=max riops=max wiops=max"}."""
    lines = {}
    for line in text.splitlines():
        words = line.split()
        if words and _DEVICE.fullmatch(words[0]):
            lines[words[0]] = " ".join(words)
    return lines


def restore_line(device: str, previous: Optional[str]) -> str:
    """What revert writes: the line io.max had, or every limit back to max (the device had none)."""
    return previous if previous else "%s %s" % (device, IO_MAX_CLEAR)
