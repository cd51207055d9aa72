# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Training jobs' progress on this node, from the files they keep fresh; which of them stalled.

A job that hangs (a stuck NCCL collective, a dead or stopped rank) holds its GPUs without failing:
nothing in NVML, the kernel log or Slurm changes. What changes is that it stops making progress. So
each rank of a job touches a file as it works (docs/agent.md, "Job progress"):

* ``<progress_dir>/<job id>.<rank>``, e.g. ``/run/gpufleet/progress/4242.0``; the Slurm TaskProlog
  exports the path as ``GPUFLEET_PROGRESS_FILE`` and the Epilog removes the job's files;
* its modification time is the heartbeat: a rank that wrote nothing for the job's window stalled;
* its content is optional: empty (``touch``), or a JSON object with ``step`` (a non-negative
  integer, shown in the metrics) and ``stall_after_s`` (the job's own window, 1 s to 7 days: a job
  whose checkpoint save takes ten minutes says so instead of being called stalled).

A job stalled when any of its ranks did: one stopped rank blocks every other rank at the next
collective, and the ranks still writing are the ones waiting. Everything in the directory is data
from the jobs: names that are not ``<digits>.<digits>``, links and anything but a regular file are
ignored, a file is read to at most 4 KiB, and at most ``MAX_FILES`` files are looked at.

Reads files only: no threads, no network, no clock (the judge takes ``now``).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError

FILE_NAME = re.compile(r"(?P<job>[0-9]{1,12})\.(?P<rank>[0-9]{1,7})")
MAX_FILES = 256  # bounds the agent's work and the metrics' cardinality on a node
MAX_READ = 4096
WINDOW_MIN_S = 1.0
WINDOW_MAX_S = 7 * 86400.0


@dataclass(frozen=True)
class RankProgress:
    """One rank's file as it was read."""

    job_id: str
    rank: int
    updated: float  # the file's modification time, seconds since the epoch
    step: Optional[int] = None
    stall_after_s: Optional[float] = None  # the job's own window, when the file gives one
    error: Optional[str] = None  # content that could not be used; the heartbeat still counts


@dataclass(frozen=True)
class JobStall:
    """A job of which at least one rank wrote nothing for longer than the job's window."""

    job_id: str
    ranks: Tuple[int, ...]  # the stalled ranks
    since: float  # the stalled ranks' newest heartbeat: no progress from here on
    window: float

    @property
    def detail(self) -> str:
        return "job %s: rank(s) %s made no progress for more than %gs (last at %s)" % (
            self.job_id, ",".join(str(rank) for rank in self.ranks), self.window, _iso(self.since))


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def parse_content(raw: bytes) -> Tuple[Optional[int], Optional[float], Optional[str]]:
    """``(step, stall_after_s, error)`` from a progress file's bytes; empty content is a plain heartbeat."""
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return None, None, None
    try:
        document = json.loads(text)
    except ValueError:
        return None, None, "not JSON"
    if not isinstance(document, dict):
        return None, None, "not a JSON object"
    step, window, problems = document.get("step"), document.get("stall_after_s"), []
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        problems.append("step must be a non-negative integer")
        step = None
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, (int, float)) \
                or not WINDOW_MIN_S <= window <= WINDOW_MAX_S:
            problems.append("stall_after_s must be a number of seconds from %g to %g" % (WINDOW_MIN_S, WINDOW_MAX_S))
            window = None
        else:
            window = float(window)
    return step, window, "; ".join(problems) or None


def _read_one(directory: str, name: str, job_id: str, rank: int) -> Optional[RankProgress]:
    """One file, never following a link; None when it is gone or is not a regular file."""
    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # removed since the listing (the job ended), a link, or not ours to read
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        try:
            raw = os.read(fd, MAX_READ)
        except OSError as exc:  # the heartbeat (the file's time) still counts; only its content is lost
            return RankProgress(job_id, rank, info.st_mtime, error="unreadable: %s" % (exc.strerror or exc))
    except OSError:
        return None
    finally:
        os.close(fd)
    step, window, error = parse_content(raw)
    return RankProgress(job_id, rank, info.st_mtime, step, window, error)


def read_progress(directory: str) -> Tuple[List[RankProgress], int]:
    """Every rank's file in ``directory`` (sorted by job, then rank) and how many entries were ignored.

    No directory: no job reports here, not an error. A directory that cannot be listed raises
    ``HealthError``."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise HealthError("%s: cannot list: %s" % (directory, exc.strerror or exc)) from exc
    ignored = 0
    found: List[Tuple[int, int, str]] = []
    for name in names:
        match = FILE_NAME.fullmatch(name)
        if match is None:
            ignored += 1  # a train_sim save in progress, a stray file: not a rank's heartbeat
            continue
        found.append((int(match.group("job")), int(match.group("rank")), name))
    found.sort()
    ignored += max(0, len(found) - MAX_FILES)
    ranks: List[RankProgress] = []
    for job, rank, name in found[:MAX_FILES]:
        progress = _read_one(directory, name, str(job), rank)
        if progress is None:
            ignored += 1
        else:
            ranks.append(progress)
    return ranks, ignored


def job_windows(ranks: Sequence[RankProgress], default_window: float) -> Dict[str, float]:
    """Each job's window: the longest any of its ranks declared, else ``default_window``."""
    windows: Dict[str, float] = {}
    for progress in ranks:
        declared = progress.stall_after_s
        if declared is not None:
            windows[progress.job_id] = max(windows.get(progress.job_id, 0.0), declared)
    return {progress.job_id: windows.get(progress.job_id, default_window) for progress in ranks}


def stalls(ranks: Sequence[RankProgress], now: float, default_window: float) -> List[JobStall]:
    """The jobs stalled at ``now``, sorted by job id (numerically)."""
    windows = job_windows(ranks, default_window)
    stalled: Dict[str, List[RankProgress]] = {}
    for progress in ranks:
        # A heartbeat from the future (a clock step) is fresh, never a negative age.
        if now - progress.updated > windows[progress.job_id]:
            stalled.setdefault(progress.job_id, []).append(progress)
    return [JobStall(job_id, tuple(item.rank for item in items), max(item.updated for item in items),
                     windows[job_id])
            for job_id, items in sorted(stalled.items(), key=lambda entry: int(entry[0]))]
