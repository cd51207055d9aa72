# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The checkpoint family without a kernel: train_sim's lines (written by train_sim's own logger), mountinfo,
the fill arithmetic, io.max, input checks, and inject/revert over fake mounts, a fake volume, a fake
Slurm client and a fake clock. tests/integration/chaos/test_checkpoint_volume.py runs them on a real tmpfs."""

from __future__ import annotations

import errno
import importlib.util
import io
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import checkpoint, checkpoint_parse
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmCommandError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import CommandResult, SlurmRunner

REPO = Path(__file__).resolve().parents[5]
MIB = 1024 * 1024


def _train_sim():
    spec = importlib.util.spec_from_file_location("train_sim_for_chaos", REPO / "roles" / "slurm" / "files" /
                                                  "train_sim.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_sim_for_chaos"] = module
    spec.loader.exec_module(module)
    return module


train_sim = _train_sim()


def log_lines(*events) -> str:
    """Lines exactly as train_sim prints them."""
    stream = io.StringIO()
    logger = train_sim.Logger(stream)
    for name, fields in events:
        logger.event(name, **fields)
    return stream.getvalue()


# ---- train_sim's lines ---------------------------------------------------------------------------
def test_train_sim_lines_parse_into_events() -> None:
    text = log_lines(
        ("skip_partial", {"file": ".ckpt-000000010.json.4242.tmp"}),
        ("resume", {"step": 5, "source": "ckpt-000000005.json", "steps": 100}),
        ("checkpoint_begin", {"step": 10, "file": "ckpt-000000010.json"}),
        ("checkpoint_failed", {"step": 10, "reason": "ENOSPC", "kept": "ckpt-000000005.json"}),
        ("checkpoint_failed", {"step": 15, "reason": "EROFS", "kept": "-", "left": ".ckpt-000000015.json.1.tmp"}),
    )
    events = checkpoint_parse.parse_events(text)
    assert [e["event"] for e in events] == ["skip_partial", "resume", "checkpoint_begin", "checkpoint_failed",
                                            "checkpoint_failed"]
    assert events[0]["file"] == ".ckpt-000000010.json.4242.tmp"
    assert (events[1]["step"], events[1]["source"]) == (5, "ckpt-000000005.json")
    assert (events[2]["step"], events[2]["file"]) == (10, "ckpt-000000010.json")
    assert (events[3]["reason"], events[3]["kept"]) == ("ENOSPC", "ckpt-000000005.json")
    assert events[4]["left"] == ".ckpt-000000015.json.1.tmp"
    assert isinstance(events[2]["time"], float)
    assert [e["step"] for e in checkpoint_parse.parse_events(text, ("checkpoint_failed",))] == [10, 15]


@pytest.mark.parametrize("line", ["", "   ", "Traceback (most recent call last):", "step step=x time=1",
                                  "key=value step=1", "checkpoint_begin step=", "checkpoint_begin =3",
                                  "slurmstepd: error: *** JOB 12 ON gpu-a-001 CANCELLED ***"])
def test_lines_that_are_not_train_sim_events_are_ignored(line: str) -> None:
    assert checkpoint_parse.parse_event(line) is None


def test_the_tracker_knows_when_a_save_is_in_progress() -> None:
    begin10 = ("checkpoint_begin", {"step": 10, "file": "ckpt-000000010.json"})
    assert checkpoint_parse.save_in_progress(log_lines(begin10)) == 10
    assert checkpoint_parse.save_in_progress(log_lines(begin10, ("checkpoint", {"step": 10, "file": "x"}))) is None
    assert checkpoint_parse.save_in_progress(log_lines(
        begin10, ("checkpoint_failed", {"step": 10, "reason": "ENOSPC", "kept": "-"}))) is None
    # A killed run's half save is over once the job runs again.
    resumed = log_lines(begin10, ("resume", {"step": 5, "source": "x", "steps": 9}))
    assert checkpoint_parse.save_in_progress(resumed) is None
    tracker = checkpoint_parse.SaveTracker()
    for event in checkpoint_parse.parse_events(log_lines(
            ("start", {"step": 0, "steps": 30}), ("checkpoint_begin", {"step": 5, "file": "a"}),
            ("checkpoint", {"step": 5, "file": "a"}), begin10,
            ("checkpoint_failed", {"step": 10, "reason": "EIO", "kept": "a"}),
            ("interrupted", {"step": 12, "signal": "SIGTERM", "checkpoint": "a", "exit": 75}))):
        tracker.feed(event)
    assert (tracker.last_saved, tracker.in_progress, tracker.ended) == (5, None, "interrupted")
    assert tracker.finished == {5: "checkpoint", 10: "checkpoint_failed"}


# ---- mountinfo -----------------------------------------------------------------------------------
MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
60 27 0:45 / /var/tmp/lab/storage/checkpoints rw,relatime shared:30 - tmpfs gpufleet-lab-checkpoints rw,size=262144k
61 60 0:45 / /var/tmp/lab/storage/checkpoints ro,relatime shared:30 - tmpfs gpufleet-lab-checkpoints rw,size=262144k
70 27 8:17 / /mnt/my\\040disk rw - xfs /dev/sdb1 rw,attr2
"""


def test_mountinfo_parses_optional_fields_escapes_and_stacking() -> None:
    mounts = checkpoint_parse.parse_mountinfo(MOUNTINFO)
    assert len(mounts) == 6
    tmpfs = mounts[3]
    assert (tmpfs["mount_id"], tmpfs["parent_id"], tmpfs["device"], tmpfs["fstype"], tmpfs["source"]) == (
        60, 27, "0:45", "tmpfs", "gpufleet-lab-checkpoints")
    assert tmpfs["super_options"] == ["rw", "size=262144k"]
    assert mounts[5]["mount_point"] == "/mnt/my disk"
    point = "/var/tmp/lab/storage/checkpoints"
    # Stacked: the one listed last is on top, and it is read-only.
    top = checkpoint_parse.mount_for(point + "/job-1/ckpt-000000005.json", mounts)
    assert top["mount_id"] == 61 and checkpoint_parse.read_only(top)
    assert [m["mount_id"] for m in checkpoint_parse.stacked(point, mounts)] == [60, 61]
    assert checkpoint_parse.mount_for("/var/tmp/lab/storage/checkpointsX", mounts)["mount_point"] == "/"
    assert checkpoint_parse.mount_for("/mnt/my disk/x", mounts)["device"] == "8:17"
    assert checkpoint.cgroup2_root(mounts) == "/sys/fs/cgroup/unified"
    assert not checkpoint_parse.read_only(mounts[3])


# ---- fill arithmetic -----------------------------------------------------------------------------
@pytest.mark.parametrize(("free", "leave", "block", "size"), [
    (10 * MIB, MIB, 4096, 10 * MIB - (MIB - 4096)),
    (10 * MIB, 1000, 4096, 10 * MIB),  # less than a block to leave: fill it all
    (10 * MIB, 5000, 4096, 10 * MIB - 4096),
    (10 * MIB, 0, 4096, 10 * MIB),
    (512 * 1024, MIB, 4096, 0),  # already below
    (0, 0, 4096, 0),
])
def test_fill_size(free: int, leave: int, block: int, size: int) -> None:
    assert checkpoint_parse.fill_size(free, leave, block) == size


@given(blocks=st.integers(0, 10 ** 7), leave=st.integers(0, 10 ** 10), block=st.sampled_from([512, 4096, 65536]))
def test_a_fill_leaves_less_than_asked_but_never_more_than_a_block_less(blocks: int, leave: int, block: int) -> None:
    free = blocks * block
    size = checkpoint_parse.fill_size(free, leave, block)
    assert 0 <= size <= free and size % block == 0
    assert checkpoint_parse.below(free - size, leave)
    if size:
        assert free - size + block >= leave  # the smallest fill that gets there


# ---- io.max --------------------------------------------------------------------------------------
def test_io_max_lines() -> None:
    assert checkpoint_parse.io_max_line("8:0", "1048576", None) == "8:0 rbps=1048576"
    assert checkpoint_parse.io_max_line("259:0", "max", "2097152") == "259:0 rbps=max wbps=2097152"
    with pytest.raises(FieldError):
        checkpoint_parse.io_max_line("sda", "1", None)
    with pytest.raises(FieldError, match=r"params\.rbps"):
        checkpoint_parse.io_max_line("8:0", None, None)
    text = "8:0 rbps=1048576 wbps=max riops=max wiops=max\n259:0 rbps=max wbps=10 riops=max wiops=max\n"
    assert checkpoint_parse.parse_io_max(text) == {"8:0": "8:0 rbps=1048576 wbps=max riops=max wiops=max",
                                                   "259:0": "259:0 rbps=max wbps=10 riops=max wiops=max"}
    assert checkpoint_parse.parse_io_max("") == {}
    assert checkpoint_parse.restore_line("8:0", None) == "8:0 rbps=max wbps=max riops=max wiops=max"
    restored = checkpoint_parse.restore_line("8:0", "8:0 rbps=5 wbps=max riops=max wiops=max")
    assert restored.endswith("rbps=5 wbps=max riops=max wiops=max")


@pytest.mark.parametrize(("value", "rate"), [(1, "1"), ("10M", str(10 * MIB)), ("2k", "2048"), ("max", "max"),
                                             ("MAX", "max"), (None, None)])
def test_rates(value, rate) -> None:
    assert checkpoint_parse.parse_rate(value, "params.rbps") == rate


@pytest.mark.parametrize("value", [0, -1, True, "fast", "1.5M", "0K"])
def test_bad_rates_name_their_field(value) -> None:
    with pytest.raises(FieldError, match=r"params\.wbps"):
        checkpoint_parse.parse_rate(value, "params.wbps")


# ---- input checks --------------------------------------------------------------------------------
def spec(experiment: str, **params) -> Dict:
    return {"experiment": experiment, "node": "gpu-a-001", "backend": "default", "params": params,
            "fault_id": "f-20261130-1-gpu-a-001", "lab_dir": "/var/tmp/lab"}


@pytest.mark.parametrize(("experiment", "params", "field"), [
    ("checkpoint_fill", {}, "params.path"),
    ("checkpoint_fill", {"path": "relative/dir"}, "params.path"),
    ("checkpoint_fill", {"path": "/x", "leave_bytes": -1}, "params.leave_bytes"),
    ("checkpoint_fill", {"path": "/x", "leave_bytes": True}, "params.leave_bytes"),
    ("checkpoint_fill", {"path": "/x", "leave_byte": 5}, "params.leave_byte"),
    ("checkpoint_fill", {"path": "/x", "allow_shared_filesystem": "yes"}, "params.allow_shared_filesystem"),
    ("checkpoint_storage", {"path": "/x", "mode": "melt"}, "params.mode"),
    ("checkpoint_storage", {"path": "/x", "mode": "slow", "job_id": 4}, "params.rbps"),
    ("checkpoint_storage", {"path": "/x", "mode": "slow", "rbps": "1M"}, "params.job_id"),
    ("checkpoint_storage", {"path": "/x", "mode": "slow", "rbps": "1M", "job_id": "--me"}, "params.job_id"),
    ("checkpoint_storage", {"path": "/x", "mode": "cut", "wbps": "1M"}, "params.wbps"),
    ("checkpoint_kill", {}, "params.job_id"),
    ("checkpoint_kill", {"job_id": "12 13"}, "params.job_id"),
    ("checkpoint_kill", {"job_id": 12, "timeout_s": 0}, "params.timeout_s"),
    ("checkpoint_kill", {"job_id": 12, "output": "slurm-12.out"}, "params.output"),
    ("checkpoint_kill", {"job_id": 12, "requeue": "no"}, "params.requeue"),
    ("gpu_xid", {}, "experiment"),
])
def test_bad_input_names_its_field_in_plan_and_inject(experiment, params, field) -> None:
    bad = dict(spec(experiment, **params), lab_dir=None)  # a real site: no default path
    for call in (lambda: checkpoint.plan(bad), lambda: checkpoint.inject(bad, FaultContext())):
        with pytest.raises(FieldError) as caught:
            call()
        assert caught.value.field == field


# ---- fakes ---------------------------------------------------------------------------------------
def mounts_for(volume: Path, device: str = "0:45", fstype: str = "tmpfs", stacked_ro: bool = False) -> List[Dict]:
    text = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
    text += "60 27 %s / %s rw,relatime - %s gpufleet-lab-checkpoints rw,size=4096k\n" % (device, volume, fstype)
    if stacked_ro:
        text += "61 60 %s / %s ro,relatime - %s gpufleet-lab-checkpoints rw,size=4096k\n" % (device, volume, fstype)
    return checkpoint_parse.parse_mountinfo(text)


class FakeVolume:
    """statvfs of a small volume whose use is what its files allocate, so a fill runs on a temp dir."""

    def __init__(self, root: Path, capacity: int, block: int = 4096) -> None:
        self.root, self.capacity, self.block = root, capacity, block
        self.extra = 0  # bytes someone else uses

    def used(self) -> int:
        total = self.extra
        for path in self.root.rglob("*"):
            size = path.stat().st_size if path.is_file() else 0
            total += -(-size // self.block) * self.block
        return total

    def statvfs(self, path) -> SimpleNamespace:
        free = max(0, self.capacity - self.used()) // self.block
        return SimpleNamespace(f_bfree=free, f_bavail=free, f_frsize=self.block, f_blocks=self.capacity // self.block)


@pytest.fixture
def volume(tmp_path, monkeypatch) -> FakeVolume:
    root = tmp_path / "checkpoints"
    root.mkdir()
    fake = FakeVolume(root, capacity=4 * MIB)
    monkeypatch.setattr(checkpoint, "read_mounts", lambda: mounts_for(root))
    monkeypatch.setattr(checkpoint.os, "statvfs", fake.statvfs)
    return fake


CTX = FaultContext.of(lab_dir="/var/tmp/lab", slurm_conf="/var/tmp/lab/slurm/slurm.conf", check_mode=False)


# ---- fill ----------------------------------------------------------------------------------------
def test_fill_leaves_less_than_asked_and_revert_gives_it_back(volume: FakeVolume) -> None:
    (volume.root / "ckpt-000000005.json").write_bytes(b"x" * 10000)
    before = volume.statvfs(volume.root)
    fill = spec("checkpoint_fill", path=str(volume.root), leave_bytes=256 * 1024)
    undo = checkpoint.inject(fill, CTX)
    free = checkpoint_parse.free_bytes(volume.statvfs(volume.root))
    assert free < 256 * 1024 and undo["free_after"] == free
    assert undo["filler"] == str(volume.root / ".gpufleet-chaos-fill-f-20261130-1-gpu-a-001")
    assert Path(undo["filler"]).stat().st_size == undo["bytes"] > 3 * MIB
    assert undo["free_before"] == checkpoint_parse.free_bytes(before)
    # Injected twice (a retried drill): still one filler, still below.
    again = checkpoint.inject(fill, CTX)
    assert again["filler"] == undo["filler"] and checkpoint_parse.free_bytes(volume.statvfs(volume.root)) < 256 * 1024
    assert checkpoint.revert(dict(fill, **undo), CTX) == {"reverted": ["deleted %s" % undo["filler"]],
                                                          "already": False}
    assert volume.statvfs(volume.root) == before
    assert checkpoint.revert(dict(fill, **undo), CTX)["already"] is True
    assert sorted(p.name for p in volume.root.iterdir()) == ["ckpt-000000005.json"]


def test_fill_takes_what_the_filesystem_gives_when_it_refuses_a_large_allocation(volume, monkeypatch) -> None:
    real = os.posix_fallocate
    asked = []

    def stingy(fd: int, offset: int, size: int) -> None:
        asked.append(size)
        if size > MIB:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, size)

    monkeypatch.setattr(checkpoint.os, "posix_fallocate", stingy)
    undo = checkpoint.inject(spec("checkpoint_fill", path=str(volume.root), leave_bytes=0), CTX)
    assert undo["free_after"] == 0
    # Each round asks for all that is left, then halves until the filesystem says yes.
    assert asked[:3] == [4 * MIB, 2 * MIB, MIB]
    assert len(asked) < 40


def test_a_fill_that_cannot_get_below_gives_up_and_removes_its_file(volume, monkeypatch) -> None:
    full = SimpleNamespace(f_bfree=512, f_bavail=512, f_frsize=4096, f_blocks=1024)
    monkeypatch.setattr(checkpoint.os, "statvfs", lambda path: full)
    with pytest.raises(GpufleetError, match="could not fill"):
        checkpoint.inject(spec("checkpoint_fill", path=str(volume.root), leave_bytes=4096), CTX)
    assert list(volume.root.iterdir()) == []


def test_fill_refuses_a_directory_that_is_not_its_own_mount(volume, monkeypatch) -> None:
    sub = volume.root / "job-1"
    sub.mkdir()
    with pytest.raises(FieldError, match="not a mount point") as caught:
        checkpoint.inject(spec("checkpoint_fill", path=str(sub)), CTX)
    assert caught.value.field == "params.path"
    # The root filesystem never, even when shared filesystems are allowed.
    monkeypatch.setattr(checkpoint, "read_mounts", lambda: checkpoint_parse.parse_mountinfo(
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n"))
    with pytest.raises(FieldError, match="root filesystem"):
        checkpoint.inject(spec("checkpoint_fill", path=str(sub), allow_shared_filesystem=True), CTX)
    assert list(sub.iterdir()) == []


def test_fill_of_a_shared_filesystem_only_when_allowed(volume) -> None:
    sub = volume.root / "job-1"
    sub.mkdir()
    undo = checkpoint.inject(spec("checkpoint_fill", path=str(sub), allow_shared_filesystem=True), CTX)
    assert Path(undo["filler"]).parent == sub
    assert checkpoint.revert(dict(spec("checkpoint_fill"), **undo), CTX)["already"] is False


def test_fill_in_check_mode_changes_nothing(volume) -> None:
    undo = checkpoint.inject(spec("checkpoint_fill", path=str(volume.root)), replace(CTX, check_mode=True))
    assert undo["check_mode"] is True and undo["bytes"] == 4 * MIB - (MIB - 4096)
    assert list(volume.root.iterdir()) == []


def test_fill_revert_from_the_spec_alone_after_a_crash_mid_inject(volume) -> None:
    fill = spec("checkpoint_fill", path=str(volume.root))
    filler = volume.root / (".gpufleet-chaos-fill-" + fill["fault_id"])
    filler.write_bytes(b"\0" * 8192)
    assert checkpoint.revert(fill, CTX)["reverted"] == ["deleted %s" % filler]
    assert not filler.exists()
    with pytest.raises(GpufleetError, match="not a chaos filler"):
        checkpoint.revert(dict(fill, filler=str(volume.root / "ckpt-000000005.json")), CTX)


def test_the_lab_volume_is_the_default_path(tmp_path, monkeypatch) -> None:
    lab = tmp_path / "lab"
    (lab / "storage" / "checkpoints").mkdir(parents=True)
    monkeypatch.setattr(checkpoint, "read_mounts", lambda: mounts_for(lab / "storage" / "checkpoints"))
    fill = dict(spec("checkpoint_fill"), lab_dir=str(lab))
    assert str(lab / "storage" / "checkpoints" / ".gpufleet-chaos-fill-") in checkpoint.plan(fill)["actions"][0]
    with pytest.raises(FieldError) as caught:
        checkpoint.plan(dict(fill, lab_dir=None))
    assert caught.value.field == "params.path"


def test_fill_plan(volume) -> None:
    planned = checkpoint.plan(spec("checkpoint_fill", path=str(volume.root), leave_bytes=4096))
    assert planned["missing"] == []
    assert "fewer than 4096 bytes are free" in planned["actions"][0]
    assert ".gpufleet-chaos-fill-f-20261130-1-gpu-a-001" in planned["actions"][0]
    assert planned["simulated"] == ["the checkpoint volume is the lab's size-limited tmpfs"]


# ---- storage: cut --------------------------------------------------------------------------------
class FakeMount:
    """mount/umount over an in-memory mountinfo."""

    def __init__(self, root: Path, busy: bool = False) -> None:
        self.root = root
        self.busy = busy
        self.ran: List[List[str]] = []
        self.table = [dict(m) for m in mounts_for(root)]

    def read(self) -> List[Dict]:
        return [dict(m) for m in self.table]

    def run(self, argv: List[str]) -> str:
        self.ran.append(argv)
        point = argv[-1]
        on = [m for m in self.table if m["mount_point"] == point]
        if argv[:3] == ["mount", "-o", "remount,ro"]:
            if self.busy:
                raise checkpoint.CommandFailed(argv, 32, "mount: %s: mount point is busy." % point)
            on[-1]["options"] = ["ro", *on[-1]["options"][1:]]
            on[-1]["super_options"] = ["ro", *on[-1]["super_options"][1:]]
        elif argv[:3] == ["mount", "-o", "remount,rw"]:
            on[-1]["options"] = ["rw", *on[-1]["options"][1:]]
            on[-1]["super_options"] = ["rw", *on[-1]["super_options"][1:]]
        elif argv[:2] == ["mount", "--bind"]:
            self.table.append(dict(on[-1], mount_id=max(m["mount_id"] for m in self.table) + 1,
                                   parent_id=on[-1]["mount_id"]))
        elif argv[:3] == ["mount", "-o", "remount,bind,ro"]:
            on[-1]["options"] = ["ro", *on[-1]["options"][1:]]
        elif argv[0] == "umount":
            self.table.remove(on[-1])
        return ""


@pytest.fixture
def mounts(tmp_path, monkeypatch) -> FakeMount:
    root = tmp_path / "checkpoints"
    root.mkdir()
    fake = FakeMount(root)
    monkeypatch.setattr(checkpoint, "read_mounts", fake.read)
    monkeypatch.setattr(checkpoint, "_run", fake.run)
    return fake


def test_cut_remounts_read_only_and_back(mounts: FakeMount) -> None:
    cut = spec("checkpoint_storage", path=str(mounts.root), mode="cut")
    undo = checkpoint.inject(cut, CTX)
    point = str(mounts.root)
    assert (undo["method"], undo["was_rw"], undo["mountpoint"]) == ("remount", True, point)
    assert mounts.ran == [["mount", "-o", "remount,ro", point]]
    assert checkpoint_parse.read_only(mounts.read()[-1])
    assert checkpoint.revert(dict(cut, **undo), CTX)["reverted"] == ["mount -o remount,rw %s" % point]
    assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is True
    assert mounts.ran[1:] == [["mount", "-o", "remount,rw", point]]
    assert mounts.read() == mounts_for(mounts.root)


def test_cut_of_a_busy_volume_stacks_a_read_only_bind_mount(mounts: FakeMount) -> None:
    mounts.busy = True
    cut = spec("checkpoint_storage", path=str(mounts.root), mode="cut")
    undo = checkpoint.inject(cut, CTX)
    point = str(mounts.root)
    assert (undo["method"], undo["mount_id"]) == ("bind", 61)
    assert "busy" in undo["remount_refused"]
    assert mounts.ran[1:] == [["mount", "--bind", point, point], ["mount", "-o", "remount,bind,ro", point]]
    assert checkpoint_parse.read_only(checkpoint_parse.mount_for(point, mounts.read()))
    assert checkpoint.revert(dict(cut, **undo), CTX)["reverted"] == ["umount %s (the read-only bind mount)" % point]
    assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is True
    assert mounts.read() == mounts_for(mounts.root)


def test_cut_revert_from_the_spec_alone_removes_only_a_read_only_bind_mount(mounts: FakeMount) -> None:
    cut = spec("checkpoint_storage", path=str(mounts.root), mode="cut")
    assert checkpoint.revert(cut, CTX)["already"] is True  # nothing stacked: nothing touched
    assert mounts.ran == []
    mounts.busy = True
    checkpoint.inject(cut, CTX)
    assert checkpoint.revert(cut, CTX)["already"] is False
    assert mounts.read() == mounts_for(mounts.root)


def test_cut_of_a_read_only_volume_does_nothing(mounts: FakeMount) -> None:
    mounts.table[-1]["options"][0] = "ro"
    cut = spec("checkpoint_storage", path=str(mounts.root))
    undo = checkpoint.inject(cut, CTX)
    assert (undo["was_rw"], undo["method"], mounts.ran) == (False, None, [])
    assert checkpoint.revert(dict(cut, **undo), CTX)["already"] is True
    assert mounts.ran == []


def test_cut_plan_describes_the_network_alternative(mounts: FakeMount) -> None:
    planned = checkpoint.plan(spec("checkpoint_storage", path=str(mounts.root), mode="cut"))
    assert "remount,ro" in planned["actions"][0]
    assert "netem" in planned["alternatives"][0] and "firewall" in planned["alternatives"][0]


# ---- storage: slow -------------------------------------------------------------------------------
def test_slow_on_a_tmpfs_is_a_missing_capability(mounts: FakeMount) -> None:
    slow = spec("checkpoint_storage", path=str(mounts.root), mode="slow", wbps="1M", job_id=42)
    planned = checkpoint.plan(slow)
    assert any("io.max" in item and "no block device" in item for item in planned["missing"])
    assert "<no block device> wbps=1048576" in planned["actions"][0]
    with pytest.raises(GpufleetError, match=r"missing capability: .* no block device"):
        checkpoint.inject(slow, CTX)
    assert mounts.ran == []


@pytest.fixture
def disk(tmp_path, monkeypatch) -> SimpleNamespace:
    """A volume on partition 8:1 of disk 8:0 (fake sysfs), and a job cgroup with an io.max file."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    sysfs = tmp_path / "sys"
    (sysfs / "devices" / "sda" / "sda1").mkdir(parents=True)
    (sysfs / "devices" / "sda" / "dev").write_text("8:0\n")
    (sysfs / "devices" / "sda" / "sda1" / "partition").write_text("1\n")
    (sysfs / "dev" / "block").mkdir(parents=True)
    (sysfs / "dev" / "block" / "8:1").symlink_to(sysfs / "devices" / "sda" / "sda1")
    cgroups = tmp_path / "cgroup"
    job = cgroups / "system.slice" / "slurmstepd.scope" / "job_42"
    job.mkdir(parents=True)
    (job / "io.max").write_text("")
    (cgroups / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    table = checkpoint_parse.parse_mountinfo(
        "27 1 254:0 / / rw - ext4 /dev/vda rw\n41 27 0:38 / %s rw - cgroup2 cgroup2 rw\n"
        "60 27 8:1 / %s rw - xfs /dev/sda1 rw\n" % (cgroups, root))
    monkeypatch.setattr(checkpoint, "read_mounts", lambda: table)
    monkeypatch.setattr(checkpoint, "SYS", str(sysfs))
    return SimpleNamespace(root=root, io_max=job / "io.max", job=job)


def test_slow_writes_io_max_for_the_whole_disk_and_revert_restores_it(disk) -> None:
    slow = spec("checkpoint_storage", path=str(disk.root), mode="slow", rbps="2M", wbps=1048576, job_id=42)
    assert checkpoint.plan(slow)["missing"] == [] or os.geteuid() != 0
    undo = checkpoint.inject(slow, CTX)
    assert (undo["device"], undo["cgroup"], undo["previous"]) == ("8:0", str(disk.job), None)
    assert disk.io_max.read_text() == "8:0 rbps=2097152 wbps=1048576\n"
    assert checkpoint.revert(dict(slow, **undo), CTX)["reverted"] == [
        "%s: 8:0 rbps=max wbps=max riops=max wiops=max" % disk.io_max]
    assert checkpoint.revert(dict(slow, **undo), CTX)["already"] is True


def test_slow_keeps_and_restores_an_existing_limit(disk) -> None:
    disk.io_max.write_text("8:0 rbps=max wbps=max riops=100 wiops=max\n")
    slow = spec("checkpoint_storage", path=str(disk.root), mode="slow", wbps="1M", cgroup=str(disk.job))
    undo = checkpoint.inject(slow, CTX)
    assert undo["previous"] == "8:0 rbps=max wbps=max riops=100 wiops=max"
    checkpoint.revert(dict(slow, **undo), CTX)
    assert disk.io_max.read_text() == "8:0 rbps=max wbps=max riops=100 wiops=max\n"


def test_slow_without_the_io_controller_or_the_job_cgroup_says_what_is_missing(disk) -> None:
    with pytest.raises(GpufleetError, match="no cgroup for job 7"):
        checkpoint.inject(spec("checkpoint_storage", path=str(disk.root), mode="slow", wbps="1M", job_id=7), CTX)
    disk.io_max.unlink()
    with pytest.raises(GpufleetError, match="io controller is not enabled"):
        checkpoint.inject(spec("checkpoint_storage", path=str(disk.root), mode="slow", wbps="1M", job_id=42), CTX)
    # The job ended and took its cgroup along: nothing left to revert.
    gone = {"experiment": "checkpoint_storage", "mode": "slow", "io_max": str(disk.io_max), "device": "8:0"}
    assert checkpoint.revert(gone, CTX)["already"] is True


# ---- kill ----------------------------------------------------------------------------------------
class FakeClient(SlurmClient):
    """Our SlurmClient: its commands are built by the real client and runner, and recorded, not run."""

    def __init__(self, output: Path, requeue_failures: int = 0, on_kill: str = "") -> None:
        self.output = output
        self.requeue_failures = requeue_failures
        self.on_kill = on_kill
        self.calls: List[List[str]] = []
        self.state = "RUNNING"
        super().__init__(SlurmRunner(run=self._run, slurm_conf="/lab/slurm.conf"))

    def _run(self, argv, env, timeout):
        self.calls.append(list(argv))
        assert env["SLURM_CONF"] == "/lab/slurm.conf"
        if argv[0] == "scancel":
            self.state = "FAILED"
            if self.on_kill:
                with open(self.output, "a") as handle:
                    handle.write(self.on_kill)
            return 0, "", ""
        return 0, "JobId=42 JobName=train StdOut=%s StdErr=%s\n" % (self.output, self.output), ""

    def requeue(self, job_ids) -> CommandResult:
        argv = self.runner.argv("scontrol", "action job_list", action=["requeue"], job_list=job_ids)
        self.calls.append(argv)
        if self.requeue_failures:
            self.requeue_failures -= 1
            raise SlurmCommandError(argv, 1, stderr="scontrol: error: Job is currently being completed")
        self.state = "PENDING"
        return CommandResult(argv=argv)

    def jobs(self, nodes=None, states=None) -> List[SlurmJob]:
        return [SlurmJob(job_id="42", state=self.state)]


class Clock:
    def __init__(self, on_sleep=None) -> None:
        self.now = 0.0
        self.on_sleep = on_sleep or []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep:
            self.on_sleep.pop(0)()


HISTORY = log_lines(("start", {"step": 0, "steps": 1000}), ("step", {"step": 5, "state": "ab"}),
                    ("checkpoint_begin", {"step": 5, "file": "ckpt-000000005.json"}),
                    ("checkpoint", {"step": 5, "file": "ckpt-000000005.json"}))
BEGIN_10 = log_lines(("step", {"step": 10, "state": "cd"}),
                     ("checkpoint_begin", {"step": 10, "file": "ckpt-000000010.json"}))


def kill_setup(tmp_path, monkeypatch, history: str = HISTORY, later=(), **client_args):
    output = tmp_path / "slurm-42.out"
    output.write_text(history)

    def appender(text):
        return lambda: output.open("a").write(text)

    clock = Clock([appender(text) for text in later])
    client = FakeClient(output, **client_args)
    monkeypatch.setattr(checkpoint, "_clock", clock.clock)
    monkeypatch.setattr(checkpoint, "_sleep", clock.sleep)
    monkeypatch.setattr(checkpoint, "context_slurm", lambda ctx: client)
    return output, client, clock


def test_kill_waits_for_a_new_save_then_kills_and_requeues(tmp_path, monkeypatch) -> None:
    output, client, _clock = kill_setup(tmp_path, monkeypatch, later=["step time=1 step=6 state=x\n", BEGIN_10])
    kill = spec("checkpoint_kill", job_id=42, output=str(output))
    undo = checkpoint.inject(kill, CTX)
    assert (undo["killed_step"], undo["previous_checkpoint_step"], undo["job_id"]) == (10, 5, "42")
    assert undo["save_finished_before_kill"] is None and undo["requeued"] is True
    assert client.calls == [["scancel", "--signal=KILL", "--batch", "--full", "42"], ["scontrol", "requeue", "42"]]
    assert undo["commands"] == client.calls
    done = checkpoint.revert(dict(kill, **undo), CTX)
    assert done["already"] is True and done["reverted"] == []
    assert "writing the checkpoint of step 10" in done["note"]


def test_kill_reads_the_output_path_from_slurm_and_retries_the_requeue(tmp_path, monkeypatch) -> None:
    _output, client, _clock = kill_setup(tmp_path, monkeypatch, later=[BEGIN_10], requeue_failures=2)
    undo = checkpoint.inject(spec("checkpoint_kill", job_id=42), CTX)
    assert undo["killed_step"] == 10
    assert client.calls[0] == ["scontrol", "--oneliner", "show", "job", "42"]
    kill = ["scancel", "--signal=KILL", "--batch", "--full", "42"]
    assert client.calls[1:] == [kill] + [["scontrol", "requeue", "42"]] * 3


def test_kill_reports_a_save_that_finished_before_the_kill_landed(tmp_path, monkeypatch) -> None:
    output, _client, _clock = kill_setup(tmp_path, monkeypatch, later=[BEGIN_10],
                                         on_kill="checkpoint time=2 step=10 file=ckpt-000000010.json\n")
    undo = checkpoint.inject(spec("checkpoint_kill", job_id=42, output=str(output)), CTX)
    assert undo["save_finished_before_kill"] == "checkpoint"


def test_a_save_begun_before_the_drill_does_not_count(tmp_path, monkeypatch) -> None:
    output, client, clock = kill_setup(tmp_path, monkeypatch, history=HISTORY + BEGIN_10)
    with pytest.raises(GpufleetError, match=r"no new checkpoint_begin .* within 3s; nothing killed"):
        checkpoint.inject(spec("checkpoint_kill", job_id=42, output=str(output), timeout_s=3), CTX)
    assert client.calls == [] and clock.now >= 3


def test_kill_gives_up_when_the_job_ends_first(tmp_path, monkeypatch) -> None:
    output, client, _clock = kill_setup(tmp_path, monkeypatch, later=["done time=1 step=1000 state=ff\n"])
    with pytest.raises(GpufleetError, match="ended \\(done\\)"):
        checkpoint.inject(spec("checkpoint_kill", job_id=42, output=str(output)), CTX)
    assert client.calls == []


def test_kill_that_cannot_requeue_says_so(tmp_path, monkeypatch) -> None:
    output, _client, _clock = kill_setup(tmp_path, monkeypatch, later=[BEGIN_10], requeue_failures=10 ** 6)
    with pytest.raises(GpufleetError, match="killed but not requeued within 5s"):
        checkpoint.inject(spec("checkpoint_kill", job_id=42, output=str(output), requeue_timeout_s=5), CTX)


def test_kill_with_an_unreadable_output_is_refused(tmp_path, monkeypatch) -> None:
    kill_setup(tmp_path, monkeypatch)
    with pytest.raises(FieldError) as caught:
        checkpoint.inject(spec("checkpoint_kill", job_id=42, output=str(tmp_path / "nope.out")), CTX)
    assert caught.value.field == "params.output"


def test_kill_plan_and_check_mode(tmp_path, monkeypatch) -> None:
    output, client, _clock = kill_setup(tmp_path, monkeypatch)
    planned = checkpoint.plan(spec("checkpoint_kill", job_id=42, output=str(output)))
    assert planned["missing"] == []
    assert any("scancel --signal=KILL --batch --full 42" in action for action in planned["actions"])
    assert any("scontrol requeue 42" in action for action in planned["actions"])
    undo = checkpoint.inject(spec("checkpoint_kill", job_id=42, output=str(output)), replace(CTX, check_mode=True))
    assert undo["check_mode"] is True and undo["previous_checkpoint_step"] == 5
    assert client.calls == []
