# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The jobs' progress files as the agent reads and judges them (health/job_progress.py)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.health import job_progress
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.job_progress import (
    RankProgress,
    parse_content,
    read_progress,
    stalls,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError

T0 = 1_800_000_000.0


def heartbeat(directory, name, content="", mtime=T0):
    path = directory / name
    path.write_text(content)
    os.utime(path, (mtime, mtime))
    return path


def test_no_directory_is_no_job():
    assert read_progress("/nonexistent/gpufleet/progress") == ([], 0)


def test_a_directory_that_cannot_be_listed_is_a_health_error(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with pytest.raises(HealthError, match="cannot list"):
        read_progress(str(not_a_dir))


def test_each_rank_file_is_read_with_its_heartbeat_step_and_window(tmp_path):
    heartbeat(tmp_path, "4242.0", json.dumps({"step": 120, "stall_after_s": 30}), mtime=T0 - 5)
    heartbeat(tmp_path, "4242.1", "", mtime=T0 - 1)  # touch only
    heartbeat(tmp_path, "17.0", json.dumps({"step": 3}))
    ranks, ignored = read_progress(str(tmp_path))
    assert ignored == 0
    assert [(r.job_id, r.rank, r.step, r.stall_after_s) for r in ranks] == [
        ("17", 0, 3, None), ("4242", 0, 120, 30.0), ("4242", 1, None, None)]
    assert ranks[1].updated == T0 - 5


def test_what_is_not_a_rank_file_is_ignored_and_counted(tmp_path):
    heartbeat(tmp_path, ".4242.0.123.tmp", "{}")  # a save in progress
    heartbeat(tmp_path, "notes.txt", "")
    heartbeat(tmp_path, "42.0; rm -rf", "")
    (tmp_path / "43.0").mkdir()  # not a regular file
    os.symlink("/etc/passwd", tmp_path / "44.0")  # never followed
    heartbeat(tmp_path, "45.0", "")
    ranks, ignored = read_progress(str(tmp_path))
    assert [r.job_id for r in ranks] == ["45"]
    assert ignored == 5


def test_at_most_max_files_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(job_progress, "MAX_FILES", 3)
    for job in range(5):
        heartbeat(tmp_path, "%d.0" % job, "")
    ranks, ignored = read_progress(str(tmp_path))
    assert [r.job_id for r in ranks] == ["0", "1", "2"] and ignored == 2


@pytest.mark.parametrize("content, expected", [
    ("", (None, None, None)),
    ('{"step": 7}', (7, None, None)),
    ('{"step": 7, "stall_after_s": 120}', (7, 120.0, None)),
    ("step=7", (None, None, "not JSON")),
    ("[1]", (None, None, "not a JSON object")),
    ('{"step": -1}', (None, None, "step must be a non-negative integer")),
    ('{"step": true}', (None, None, "step must be a non-negative integer")),
    ('{"stall_after_s": 0}', (None, None, "stall_after_s must be a number of seconds from 1 to 604800")),
    ('{"stall_after_s": "60"}', (None, None, "stall_after_s must be a number of seconds from 1 to 604800")),
])
def test_content(content, expected):
    assert parse_content(content.encode()) == expected


def test_bad_content_keeps_the_heartbeat(tmp_path):
    heartbeat(tmp_path, "9.0", "garbage", mtime=T0 - 2)
    (rank,), _ignored = read_progress(str(tmp_path))
    assert rank.error == "not JSON" and rank.updated == T0 - 2


def rank(job, index, updated, window=None):
    return RankProgress(job_id=job, rank=index, updated=updated, stall_after_s=window)


def test_a_job_stalls_when_any_rank_is_silent_past_the_window():
    ranks = [rank("7", 0, T0 - 1), rank("7", 1, T0 - 700), rank("8", 0, T0 - 599)]
    (stall,) = stalls(ranks, T0, 600)
    assert (stall.job_id, stall.ranks, stall.since, stall.window) == ("7", (1,), T0 - 700, 600)
    assert stall.detail.startswith("job 7: rank(s) 1 made no progress for more than 600s (last at ")


def test_the_jobs_own_window_wins_and_the_longest_rank_window_counts():
    ranks = [rank("7", 0, T0 - 100, window=30), rank("7", 1, T0 - 100, window=300)]
    assert stalls(ranks, T0, 10) == []
    assert [s.ranks for s in stalls([rank("7", 0, T0 - 100, window=30)], T0, 600)] == [(0,)]


def test_a_heartbeat_from_the_future_is_fresh():
    assert stalls([rank("7", 0, T0 + 3600)], T0, 10) == []


@given(ages=st.lists(st.floats(min_value=-100, max_value=10_000), min_size=1, max_size=8),
       window=st.floats(min_value=1, max_value=5_000))
def test_a_job_is_stalled_exactly_when_some_rank_is_older_than_the_window(ages, window):
    ranks = [rank("5", index, T0 - age) for index, age in enumerate(ages)]
    found = stalls(ranks, T0, window)
    assert bool(found) == any(T0 - (T0 - age) > window for age in ages)
    if found:
        assert set(found[0].ranks) == {i for i, age in enumerate(ages) if T0 - (T0 - age) > window}
