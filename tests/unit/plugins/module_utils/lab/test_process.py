"""lab_process's supervision logic, with real (tiny) processes."""

from __future__ import annotations

import json
import os
import sys

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import process

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def spec(tmp_path):
    return process.ProcessSpec(name="sleeper", argv=list(SLEEPER), run_dir=str(tmp_path / "run"),
                               log_dir=str(tmp_path / "log"))


@pytest.fixture(autouse=True)
def stop_everything(tmp_path):
    yield
    process.stop_all(str(tmp_path / "run"), check_mode=False, stop_timeout=2)


def test_start_is_idempotent_and_records_the_pid(spec):
    first = process.ensure_started(spec, None, check_mode=False)
    again = process.ensure_started(spec, None, check_mode=False)
    assert first.changed and first.action == "start"
    assert not again.changed and again.pid == first.pid
    with open(process.record_path(spec.run_dir, "sleeper")) as handle:
        record = json.load(handle)
    assert record["pid"] == first.pid and record["argv"] == SLEEPER
    # Its own session: a signal to the caller's group never reaches it.
    assert os.getsid(first.pid) == first.pid


def test_check_mode_changes_nothing(spec):
    outcome = process.ensure_started(spec, None, check_mode=True)
    assert outcome.changed and outcome.pid is None
    assert process.list_records(spec.run_dir) == []


def test_changed_argv_restarts(spec):
    first = process.ensure_started(spec, None, check_mode=False)
    changed = process.ProcessSpec(**dict(spec.__dict__, argv=[*SLEEPER, "x"]))
    second = process.ensure_started(changed, None, check_mode=False)
    assert second.action == "restart" and second.pid != first.pid
    assert process.proc_start_time(first.pid) is None


def test_stop_by_record_and_stop_all(spec):
    started = process.ensure_started(spec, None, check_mode=False)
    other = process.ensure_started(process.ProcessSpec(**dict(spec.__dict__, name="other")), None, check_mode=False)
    preview = process.stop_all(spec.run_dir, check_mode=True)
    assert sorted(preview.stopped) == ["other", "sleeper"]
    assert process.proc_start_time(started.pid) is not None
    done = process.stop_all(spec.run_dir, check_mode=False, stop_timeout=2)
    assert sorted(done.stopped) == ["other", "sleeper"]
    assert process.proc_start_time(started.pid) is None and process.proc_start_time(other.pid) is None
    assert process.stop_all(spec.run_dir, check_mode=False).changed is False


def test_a_reused_pid_is_never_signalled(spec):
    # A record whose start time does not match the live process that holds the PID
    # (here: this test process) is stale; stopping it must not signal anyone.
    os.makedirs(spec.run_dir)
    stale = process.ProcessRecord(name="stale", pid=os.getpid(), argv=["gone"], start_time="1")
    with open(process.record_path(spec.run_dir, "stale"), "w") as handle:
        handle.write(stale.to_json())
    assert not process.is_alive(stale)
    outcome = process.ensure_stopped(spec.run_dir, ["stale"], check_mode=False)
    assert outcome.stopped == []
    assert process.read_record(spec.run_dir, "stale") is None


def test_a_daemon_that_dies_fails_with_its_log(tmp_path):
    dying = process.ProcessSpec(name="dying", argv=[sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"],
                                run_dir=str(tmp_path / "run"), log_dir=str(tmp_path / "log"))
    with pytest.raises(process.LabProcessError, match="bad flag"):
        process.ensure_started(dying, process.ReadinessCheck(file=str(tmp_path / "never"), timeout=5), check_mode=False)


def test_readiness_timeout_names_the_check(spec, tmp_path):
    with pytest.raises(process.LabProcessError, match="not ready after"):
        process.ensure_started(spec, process.ReadinessCheck(file=str(tmp_path / "never"), timeout=0.5),
                               check_mode=False)


@pytest.mark.parametrize("name", ["", "a/b", ".hidden", "x.pid"])
def test_bad_names_are_refused(spec, name):
    with pytest.raises(process.LabProcessError, match="name"):
        process.ensure_started(process.ProcessSpec(**dict(spec.__dict__, name=name)), None, check_mode=False)
