# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's watch of the jobs' progress files: records when a job stalls and moves again, and
the metrics."""

from __future__ import annotations

import json
import os
import stat

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.jobs import JobWatch
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.metrics import MetricsView, render

T0 = 1_800_000_000.0


def touch(directory, name, mtime, **content):
    path = directory / name
    path.write_text(json.dumps(content) if content else "")
    os.utime(path, (mtime, mtime))


def test_prepare_makes_a_sticky_directory_everyone_may_write(tmp_path):
    watch = JobWatch("gpu-a-001", str(tmp_path / "run" / "progress"), 600)
    watch.prepare()
    mode = os.stat(tmp_path / "run" / "progress").st_mode
    assert stat.S_IMODE(mode) == 0o1777


def test_a_stall_is_recorded_once_and_cleared_when_the_rank_moves_again(tmp_path):
    watch = JobWatch("gpu-a-001", str(tmp_path), 10)
    touch(tmp_path, "4242.0", T0, step=100)
    assert watch.tick(T0 + 5) == []
    (record,) = watch.tick(T0 + 11)
    assert (record["event"], record["reason"], record["verdict"], record["source"]) == (
        "fault", "JobStalled", "stalled", "progress")
    assert record["fault"]["job_id"] == "4242" and record["fault"]["ranks"] == [0]
    assert record["fault"]["summary"].startswith("job 4242: rank(s) 0 made no progress for more than 10s")
    assert watch.tick(T0 + 12) == []  # still stalled: no second record
    touch(tmp_path, "4242.0", T0 + 13, step=101)
    (cleared,) = watch.tick(T0 + 13)
    assert (cleared["event"], cleared["verdict"]) == ("cleared", "progressing")
    assert cleared["fault"]["summary"] == "job 4242 makes progress again"


def test_a_stalled_job_whose_files_go_is_cleared_as_ended(tmp_path):
    watch = JobWatch("gpu-a-001", str(tmp_path), 10)
    touch(tmp_path, "7.0", T0)
    watch.tick(T0 + 20)
    (tmp_path / "7.0").unlink()
    (cleared,) = watch.tick(T0 + 21)
    assert (cleared["event"], cleared["verdict"]) == ("cleared", "ended")


def test_a_new_default_window_applies_at_the_next_tick(tmp_path):
    watch = JobWatch("gpu-a-001", str(tmp_path), 600)
    touch(tmp_path, "7.0", T0)
    assert watch.tick(T0 + 60) == []
    watch.reconfigure(30)
    assert [r["event"] for r in watch.tick(T0 + 61)] == ["fault"]


def test_metrics(tmp_path):
    watch = JobWatch("gpu-a-001", str(tmp_path), 10)
    touch(tmp_path, "42.0", T0, step=7, stall_after_s=30)
    touch(tmp_path, "42.1", T0 - 40)
    touch(tmp_path, "43.0", T0 - 11)
    (tmp_path / "junk").write_text("")
    watch.tick(T0)
    text = render(MetricsView(node="gpu-a-001", version="t", driver_version="", kernel_log_source="none",
                              up=True, jobs=watch.view))
    assert 'gpufleet_job_progress_step{job_id="42",rank="0"} 7.0' in text
    assert 'gpufleet_job_progress_step{job_id="42",rank="1"}' not in text  # no step given
    assert 'gpufleet_job_progress_timestamp_seconds{job_id="42",rank="1"} 1.79999996e+09' in text
    assert 'gpufleet_job_stall_window_seconds{job_id="42"} 30.0' in text
    assert 'gpufleet_job_stall_window_seconds{job_id="43"} 10.0' in text
    assert 'gpufleet_job_stalled{job_id="42"} 1.0' in text  # rank 1 silent for 40 s > 30 s
    assert 'gpufleet_job_stalled{job_id="43"} 1.0' in text
    assert "gpufleet_job_progress_files_ignored 1.0" in text


class NoGpus:
    """The NVML reader's interface with nothing on it: the jobs' watch needs no NVML."""

    def open(self):
        return self

    def inventory(self):
        return []

    @staticmethod
    def driver_version():
        return "580.95.05"

    def watch_xids(self):
        return None

    def snapshot(self, full=True):
        return []

    def close(self):
        return None


def test_the_agent_journals_a_stall_and_a_reload_changes_the_window_not_the_directory(tmp_path):
    from dataclasses import replace

    from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import (
        AgentConfig,
        JobsConfig,
        KernelLogConfig,
        KubernetesConfig,
    )
    from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.loop import Agent

    progress = tmp_path / "progress"
    config = AgentConfig(node="gpu-a-001", kernel_log=KernelLogConfig(source="none"),
                         kubernetes=KubernetesConfig(enabled=False), journal=str(tmp_path / "events.jsonl"),
                         jobs=JobsConfig(progress_dir=str(progress), stall_after_s=600))
    reloaded = replace(config, jobs=JobsConfig(progress_dir=str(tmp_path / "elsewhere"), stall_after_s=5))
    agent = Agent(config, reload=lambda: reloaded, reader_factory=lambda _path: NoGpus(), clock=lambda: T0,
                  boot_id=lambda: "boot")
    agent._prepare_jobs()
    touch(progress, "7.0", T0 - 10, step=3)
    agent._snapshot(0.0)
    assert not (tmp_path / "events.jsonl").exists()  # 10 s is within the 600 s window
    agent._handle(("reload",))
    agent._snapshot(0.0)
    (record,) = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert (record["event"], record["reason"], record["fault"]["job_id"]) == ("fault", "JobStalled", "7")
    assert agent.jobs.progress_dir == str(progress) and agent.jobs.stall_after_s == 5
    assert list(agent.metrics_view().jobs.stalled) == ["7"]
