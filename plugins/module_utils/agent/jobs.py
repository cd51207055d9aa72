# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's watch of the training jobs on its node: their progress files, read each snapshot
tick, and what it publishes from them (docs/agent.md, "Job progress").

* the metrics: each rank's last heartbeat and step, each job's window and whether it stalled
  (``gpufleet_job_stalled``, which the ``GpuJobStalled`` alert reads);
* a journal record and a Kubernetes Event when a job stalls (``fault``, reason ``JobStalled``) and
  when it moves again or its files go (``cleared``).

No node condition: a hung job says nothing certain about the node (the job's own bug, a rank on
another node, the fabric), so the GPUs' condition, which the remediation acts on, stays as it is.
The judge is ``health.job_progress``; pure apart from reading the directory; the clock is passed in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.job_progress import (
    JobStall,
    RankProgress,
    job_windows,
    read_progress,
    stalls,
)

REASON = "JobStalled"
SOURCE = "progress"
# Like /tmp: every job may create its files, none may remove another's (the sticky bit).
DIRECTORY_MODE = 0o1777


@dataclass
class JobsView:
    """What a scrape shows of the node's jobs (copied under the agent's lock)."""

    ranks: List[RankProgress] = field(default_factory=list)
    windows: Dict[str, float] = field(default_factory=dict)
    stalled: Dict[str, JobStall] = field(default_factory=dict)
    ignored: int = 0


class JobWatch:
    """One per agent; ``tick`` reads and judges the progress files, ``view`` says the result."""

    def __init__(self, node: str, progress_dir: str, stall_after_s: float) -> None:
        self.node = node
        self.progress_dir = progress_dir
        self.stall_after_s = stall_after_s
        self.view = JobsView()

    def reconfigure(self, stall_after_s: float) -> None:
        """A new default window (SIGHUP)."""
        self.stall_after_s = stall_after_s

    def prepare(self) -> None:
        """Create the directory the jobs write to (their TaskProlog names it), sticky and writable by
        all like /tmp. OSError when it cannot: the loop counts it and keeps reading whatever is there."""
        os.makedirs(self.progress_dir, exist_ok=True)
        os.chmod(self.progress_dir, DIRECTORY_MODE)

    def tick(self, now: float) -> List[Dict[str, Any]]:
        """Read and judge; the journal records of the stalls that began or ended.

        A directory that cannot be listed raises ``HealthError``: the loop counts it as an error
        and keeps the last judgement."""
        ranks, ignored = read_progress(self.progress_dir)
        current = {stall.job_id: stall for stall in stalls(ranks, now, self.stall_after_s)}
        present = {progress.job_id for progress in ranks}
        before = self.view.stalled
        records = [self._record("fault", now, stall, "stalled") for job_id, stall in current.items()
                   if job_id not in before]
        records += [self._record("cleared", now, stall, "progressing" if job_id in present else "ended")
                    for job_id, stall in before.items() if job_id not in current]
        self.view = JobsView(ranks=ranks, windows=job_windows(ranks, self.stall_after_s), stalled=current,
                             ignored=ignored)
        return records

    def _record(self, event: str, now: float, stall: JobStall, verdict: str) -> Dict[str, Any]:
        summary = stall.detail if event == "fault" else "job %s %s" % (
            stall.job_id, "makes progress again" if verdict == "progressing" else "ended (its files are gone)")
        return {"time": now, "node": self.node, "event": event, "reason": REASON, "verdict": verdict,
                "source": SOURCE,
                "fault": {"job_id": stall.job_id, "ranks": list(stall.ranks), "since": stall.since,
                          "window_s": stall.window, "summary": summary}}
