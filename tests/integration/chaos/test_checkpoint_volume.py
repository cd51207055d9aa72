# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The checkpoint family on a real, private, size-limited tmpfs (no lab): fill it below N free bytes and
give the space back, cut it read-only (remount, or a read-only bind mount when a file is open for
writing on it) and back, refuse io.max on a volume with no block device, and watch the real train_sim
report the failed saves and keep its last good checkpoint.

Needs root (mount). CI runs as root, so without it these tests fail; they never skip.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_harness import REPO

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import checkpoint, checkpoint_parse
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError

pytestmark = [pytest.mark.integration]

TRAIN_SIM = REPO / "roles" / "slurm" / "files" / "train_sim.py"
MIB = 1024 * 1024
CTX = FaultContext.of(lab_dir=None, slurm_conf=None, check_mode=False)


def mounts_on(point: Path) -> list:
    return checkpoint_parse.stacked(str(point), checkpoint.read_mounts())


@pytest.fixture
def volume(tmp_path: Path):
    """A private 8 MiB tmpfs, unmounted (every mount stacked on it too) whatever the test did."""
    assert os.geteuid() == 0, "these tests mount a tmpfs: run them as root (CI does)"
    point = tmp_path / "checkpoints"
    point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=1777", "gpufleet-test-checkpoints", str(point)],
                   check=True)
    try:
        yield point
    finally:
        for _mount in mounts_on(point):
            subprocess.run(["umount", str(point)], check=True)
        assert mounts_on(point) == []


def snapshot(point: Path) -> dict:
    stat = os.statvfs(point)
    return {"free": stat.f_bfree, "files": sorted(p.name for p in point.iterdir()),
            "mounts": [(m["fstype"], m["source"], m["options"], m["super_options"]) for m in mounts_on(point)]}


def spec(experiment: str, **params) -> dict:
    return {"experiment": experiment, "node": "test-node", "backend": "default", "params": params,
            "fault_id": "f-test-%d" % os.getpid()}


def start_train_sim(point: Path, out: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, str(TRAIN_SIM), "--checkpoint-dir", str(point / "job"), "--steps", "100000",
            "--checkpoint-every", "5", "--step-seconds", "0.02", "--hash-rounds", "50", "--keep", "2", *extra]
    return subprocess.Popen(argv, stdout=out.open("w"), stderr=subprocess.STDOUT)


def wait_for_event(out: Path, name: str, after: int = 0, timeout: float = 20, **fields) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in checkpoint_parse.parse_events(out.read_text())[after:]:
            if event["event"] == name and all(str(event.get(k)) == str(v) for k, v in fields.items()):
                return event
        time.sleep(0.05)
    raise AssertionError("no %s %s within %ss in:\n%s" % (name, fields, timeout, out.read_text()[-3000:]))


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=20)


def test_fill_gets_below_leave_bytes_and_revert_leaves_the_volume_as_before(volume: Path) -> None:
    (volume / "ckpt-000000005.json").write_bytes(b"x" * 100000)
    before = snapshot(volume)
    fill = spec("checkpoint_fill", path=str(volume), leave_bytes=MIB)
    planned = checkpoint.plan(fill)
    assert planned["missing"] == []
    undo = checkpoint.inject(fill, CTX)
    free = checkpoint_parse.free_bytes(os.statvfs(volume))
    assert free < MIB and free == undo["free_after"]
    assert json.loads(json.dumps(undo)) == undo  # it goes into the ledger
    # Real bytes: a write larger than what is left fails the way a checkpoint save would.
    with pytest.raises(OSError) as caught, open(volume / "big", "wb") as handle:
        handle.write(b"y" * (2 * MIB))
        handle.flush()
        os.fsync(handle.fileno())
    assert caught.value.errno == errno.ENOSPC
    (volume / "big").unlink()
    assert checkpoint.revert(dict(fill, **undo), CTX)["already"] is False
    assert checkpoint.revert(dict(fill, **undo), CTX)["already"] is True
    assert snapshot(volume) == before


def test_fill_refuses_the_directory_below_a_mount_and_the_root_filesystem(volume: Path, tmp_path: Path) -> None:
    (volume / "job").mkdir()
    with pytest.raises(FieldError, match="not a mount point"):
        checkpoint.inject(spec("checkpoint_fill", path=str(volume / "job")), CTX)
    with pytest.raises(FieldError, match=r"root filesystem|not a mount point"):
        checkpoint.inject(spec("checkpoint_fill", path=str(tmp_path)), CTX)
    assert list((volume / "job").iterdir()) == []


def test_train_sim_reports_failed_saves_on_a_full_volume_and_keeps_its_last_good_checkpoint(
    volume: Path, tmp_path: Path
) -> None:
    out = tmp_path / "job.out"  # the job's output is off the volume, as a drill must keep it
    proc = start_train_sim(volume, out, "--checkpoint-pad-bytes", "200000")
    try:
        good = wait_for_event(out, "checkpoint", step=10)
        fill = spec("checkpoint_fill", path=str(volume), leave_bytes=64 * 1024)
        undo = checkpoint.inject(fill, CTX)
        failed = wait_for_event(out, "checkpoint_failed", reason="ENOSPC")
        assert failed["kept"].startswith("ckpt-") and int(failed["kept"][5:14]) >= good["step"]
        kept = failed["kept"]
        # Training goes on and every later save fails too, while the good checkpoint stays.
        wait_for_event(out, "checkpoint_failed", step=failed["step"] + 5, reason="ENOSPC")
        assert (volume / "job" / kept).exists()
        assert not list((volume / "job").glob(".ckpt-*.tmp"))
        checkpoint.revert(dict(fill, **undo), CTX)
        wait_for_event(out, "checkpoint", step=failed["step"] + 10, timeout=30)
    finally:
        rc = stop(proc)
    assert rc == 75
    events = checkpoint_parse.parse_events(out.read_text())
    assert [e["event"] for e in events if e["event"] in ("error", "done")] == []


def test_cut_remounts_read_only_then_read_write(volume: Path, tmp_path: Path) -> None:
    before = snapshot(volume)
    cut = spec("checkpoint_storage", path=str(volume), mode="cut")
    undo = checkpoint.inject(cut, CTX)
    assert undo["method"] == "remount" and undo["was_rw"] is True
    with pytest.raises(OSError) as caught:
        (volume / "x").write_bytes(b"x")
    assert caught.value.errno == errno.EROFS
    assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is False
    assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is True
    assert snapshot(volume) == before
    (volume / "x").write_bytes(b"x")


def test_cut_with_a_file_open_for_writing_stacks_a_read_only_bind_mount(volume: Path, tmp_path: Path) -> None:
    before = snapshot(volume)
    out = tmp_path / "job.out"
    with open(volume / "job.log", "w") as log:  # a job's output on the volume: the kernel refuses remount,ro
        proc = start_train_sim(volume, out)
        try:
            wait_for_event(out, "checkpoint", step=5)
            cut = spec("checkpoint_storage", path=str(volume), mode="cut")
            undo = checkpoint.inject(cut, CTX)
            assert undo["method"] == "bind" and "busy" in undo["remount_refused"]
            failed = wait_for_event(out, "checkpoint_failed", reason="EROFS")
            assert failed["kept"] != "-"
            log.write("the open file still writes\n")
            log.flush()
            with pytest.raises(OSError):
                (volume / "new").write_bytes(b"x")
            assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is False
            assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is True
            wait_for_event(out, "checkpoint", step=failed["step"] + 5)
        finally:
            assert stop(proc) == 75
    after = snapshot(volume)
    assert after["mounts"] == before["mounts"]
    assert (volume / "job.log").read_text() == "the open file still writes\n"


def test_cut_revert_after_a_crash_mid_inject_removes_only_our_bind_mount(volume: Path) -> None:
    before = snapshot(volume)
    subprocess.run(["mount", "--bind", str(volume), str(volume)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(volume)], check=True)
    cut = spec("checkpoint_storage", path=str(volume), mode="cut")
    assert checkpoint.revert(cut, CTX)["already"] is False  # the spec alone: no undo was stored
    assert snapshot(volume) == before
    assert checkpoint.revert(cut, CTX)["already"] is True


def test_slow_on_a_tmpfs_is_a_missing_capability_not_a_crash(volume: Path) -> None:
    before = snapshot(volume)
    slow = spec("checkpoint_storage", path=str(volume), mode="slow", wbps="1M", job_id=1)
    planned = checkpoint.plan(slow)
    assert any("no block device" in item for item in planned["missing"])
    with pytest.raises(GpufleetError, match="missing capability"):
        checkpoint.inject(slow, CTX)
    assert snapshot(volume) == before
