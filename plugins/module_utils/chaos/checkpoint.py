# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The checkpoint family: what happens to a training job when its checkpoint storage misbehaves.

Three experiments (``spec["experiment"]``), each checked before anything changes:

* ``checkpoint_kill`` - wait until the job's output shows a new ``checkpoint_begin`` line from
  train_sim (a save has started and not finished), then SIGKILL the job's batch step through
  Slurm (``scancel --signal=KILL --batch --full``: without ``--batch`` slurmctld turns a KILL into
  a cancel, SIGTERM first, and the job would save in its grace period) and ``scontrol requeue``
  it, as a lost node would. The resume must pick the previous valid checkpoint, never the torn
  one. Nothing to roll back: the job resumes by itself; the undo records which step was being
  written. Slurm truncates a requeued job's output unless it was submitted with
  ``--open-mode=append``, so the drill's job should be.
* ``checkpoint_fill`` - a filler file ``<path>/.gpufleet-chaos-fill-<fault id>`` of real, allocated
  bytes (``posix_fallocate``), grown until ``statvfs`` says fewer than ``leave_bytes`` are free.
  The job must keep its last good checkpoint and report the failed save. ``path`` must be a mount
  point of its own (the lab's size-limited tmpfs, ``<lab>/storage/checkpoints``, the default in
  the lab), so a fill never fills a root or shared filesystem by accident;
  ``allow_shared_filesystem: true`` lifts that (the root filesystem stays refused). Rollback
  deletes the file. Keep the job's output off the filled volume: once its last bytes are gone,
  the job cannot log either.
* ``checkpoint_storage`` - ``mode: cut`` makes the checkpoint volume read-only: ``mount -o
  remount,ro``, or, when the kernel refuses that because files are open for writing on it (a
  job's output file, say), a read-only bind mount stacked on the mount point, which new opens
  see while open files keep working. ``mode: slow`` writes ``MAJ:MIN rbps=.. wbps=..`` into the
  job's cgroup v2 ``io.max`` for the block device behind the path. A tmpfs (the lab) has no block
  device, so there slow is a missing capability: plan() lists it, inject() refuses with a clear
  error. On a real site whose checkpoints go over the network, netem or a firewall rule towards
  the storage endpoint is the equivalent; plan() describes it, this backend does not do it.

Root is needed for mount and io.max. ``/proc/self/mountinfo`` tells which mount holds a path
(the longest mount point that prefixes it; the last one listed when mounts are stacked).

The parsers (train_sim's lines, mountinfo, io.max) and the fill arithmetic are ``checkpoint_parse.py``,
pure and tested without a kernel; this file is the I/O, and tests/integration/chaos/test_checkpoint_volume.py
runs it on a real tmpfs.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.checkpoint_parse import (
    SaveTracker,
    below,
    fill_size,
    free_bytes,
    io_limits,
    io_max_line,
    mount_for,
    parse_event,
    parse_events,
    parse_io_max,
    parse_mountinfo,
    parse_rate,
    read_only,
    restore_line,
    stacked,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext, context_slurm
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import fault_id as check_fault_id
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_job_ids
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import AnySlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import CommandResult

FAMILY = "checkpoint"
KILL, FILL, STORAGE = "checkpoint_kill", "checkpoint_fill", "checkpoint_storage"
EXPERIMENTS = (KILL, FILL, STORAGE)
MODES = ("cut", "slow")
MIB = 1024 * 1024
DEFAULTS: Dict[str, Dict[str, Any]] = {
    KILL: {"timeout_s": 120, "poll_s": 0.05, "requeue": True, "requeue_timeout_s": 30},
    FILL: {"leave_bytes": MIB, "allow_shared_filesystem": False},
    STORAGE: {"mode": "cut", "allow_shared_filesystem": False},
}
PARAMS = {name: experiments.get(name).knobs for name in (KILL, FILL, STORAGE)}
FILL_PREFIX = ".gpufleet-chaos-fill-"
# Where the storage role puts the lab's checkpoint volume, below the lab directory.
LAB_CHECKPOINT_DIR = "storage/checkpoints"
MOUNTINFO = "/proc/self/mountinfo"
SYS = "/sys"
COMMAND_TIMEOUT = 30
# A fill that cannot get below leave_bytes in this many rounds (something keeps freeing space) gives up.
FILL_ROUNDS = 64
NETWORK_ALTERNATIVE = (
    "on a real site whose checkpoints go over the network (NFS, Lustre, an object store), cut or slow the "
    "path to the storage endpoint instead: netem on the client's interface (tc qdisc add dev IFACE root netem "
    "delay 200ms loss 5%) or a firewall rule that drops its traffic (nft add rule inet filter output ip daddr "
    "ENDPOINT drop); this backend describes it and does not do it")

# ``scancel --signal=KILL --full <job>`` alone is a cancel to slurmctld: the job gets SIGTERM, KillWait
# seconds to save a checkpoint, then SIGKILL - the graceful path, not a lost node. With ``--batch`` (the
# flag BATCH_JOB through slurmrestd) the signal goes straight to the batch step's processes
# (``--full``: the script and its children), so SIGKILL lands at once, mid-write.

# Injected so the waiting is tested without time passing.
_clock: Callable[[], float] = time.monotonic
_sleep: Callable[[float], None] = time.sleep


# -- mounts ----------------------------------------------------------------------------------------
def read_mounts() -> List[Dict[str, Any]]:
    with open(MOUNTINFO) as handle:
        return parse_mountinfo(handle.read())


# -- parameters ------------------------------------------------------------------------------------
def _experiment(spec: Mapping[str, Any]) -> str:
    name = spec.get("experiment")
    if name not in EXPERIMENTS:
        raise FieldError("experiment", "the checkpoint family runs %s, not %r" % (", ".join(EXPERIMENTS), name))
    return name


def _int(params: Mapping[str, Any], name: str, low: float, high: Optional[float] = None) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise FieldError("params.%s" % name, "must be an integer %s, not %r" % (
            ("from %d to %d" % (low, high)) if high is not None else (">= %d" % low), value))
    return value


def _seconds(params: Mapping[str, Any], name: str) -> float:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError("params.%s" % name, "must be a positive number of seconds, not %r" % (value,))
    return check_number(value, "params." + name, above=0)  # NaN passed "<= 0": a wait that never ended


def _bool(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name)
    if not isinstance(value, bool):
        raise FieldError("params.%s" % name, "must be true or false, not %r" % (value,))
    return value


def _path(params: Mapping[str, Any], name: str = "path") -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value.startswith("/"):
        raise FieldError("params.%s" % name, "must be an absolute path, not %r" % (value,))
    return os.path.realpath(value)


def check_params(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """The experiment's params with defaults, typed; FieldError("params.<name>") before anything changes."""
    name = _experiment(spec)
    given = dict(spec.get("params") or {})
    unknown = sorted(set(given) - set(PARAMS[name]))
    if unknown:
        raise FieldError("params.%s" % unknown[0], "unknown for %s; known: %s" % (name, ", ".join(PARAMS[name])))
    params = dict(DEFAULTS[name])
    params.update({key: value for key, value in given.items() if value is not None})
    if name == KILL:
        params["job_id"] = check_job_ids([params.get("job_id")] if params.get("job_id") is not None else [],
                                         "params.job_id")[0]
        if params.get("output") is not None:
            params["output"] = _path(params, "output")
        params["timeout_s"] = _seconds(params, "timeout_s")
        params["poll_s"] = _seconds(params, "poll_s")
        params["requeue_timeout_s"] = _seconds(params, "requeue_timeout_s")
        params["requeue"] = _bool(params, "requeue")
        return params
    if params.get("path") is None and spec.get("lab_dir"):
        # The lab's checkpoint volume: the storage role's tmpfs (GPUFLEET_CHECKPOINT_DIR).
        params["path"] = os.path.join(str(spec["lab_dir"]), LAB_CHECKPOINT_DIR)
    params["path"] = _path(params)
    params["allow_shared_filesystem"] = _bool(params, "allow_shared_filesystem")
    if name == FILL:
        params["leave_bytes"] = _int(params, "leave_bytes", 0)
        return params
    if params.get("mode") not in MODES:
        raise FieldError("params.mode", "must be one of %s, not %r" % (", ".join(MODES), params.get("mode")))
    if params["mode"] == "slow":
        params["rbps"] = parse_rate(params.get("rbps"), "params.rbps")
        params["wbps"] = parse_rate(params.get("wbps"), "params.wbps")
        if params["rbps"] is None and params["wbps"] is None:
            raise FieldError("params.rbps", "mode slow needs rbps, wbps or both (bytes per second, e.g. 1M)")
        if params.get("cgroup") is None and params.get("job_id") is None:
            raise FieldError("params.job_id", "mode slow throttles one job's cgroup: give job_id (or cgroup)")
        if params.get("cgroup") is not None:
            params["cgroup"] = _path(params, "cgroup")
        if params.get("job_id") is not None:
            params["job_id"] = check_job_ids([params["job_id"]], "params.job_id")[0]
    else:
        for name_ in ("rbps", "wbps", "cgroup", "job_id"):
            if params.get(name_) is not None:
                raise FieldError("params.%s" % name_, "is only for mode slow")
    return params


def filler_path(path: str, fault_id: str) -> str:
    return os.path.join(path, FILL_PREFIX + fault_id)


def volume(path: str, mounts: List[Dict[str, Any]], allow_shared: bool) -> Dict[str, Any]:
    """The mount that ``path`` is the root of; FieldError("params.path") when it is not one of its own.

    A fill or a read-only remount of whatever filesystem happens to hold a directory could hit the
    machine's root filesystem or a volume other jobs share; the drill must name the volume itself.
    """
    if not os.path.isdir(path):
        raise FieldError("params.path", "%s is not a directory" % path)
    mount = mount_for(path, mounts)
    if mount is None:
        raise FieldError("params.path", "no mount holds %s (%s unreadable?)" % (path, MOUNTINFO))
    if mount["mount_point"] == "/":
        raise FieldError("params.path", "%s is on the root filesystem; the checkpoint volume must be a mount of its "
                                        "own" % path)
    if mount["mount_point"] != path and not allow_shared:
        raise FieldError("params.path", "%s is not a mount point but a directory on %s (%s %s); name the checkpoint "
                                        "volume's own mount point, or set allow_shared_filesystem: true" % (
                                            path, mount["mount_point"], mount["fstype"], mount["source"]))
    return mount


def _has_block_device(mount: Mapping[str, Any]) -> bool:
    # Major 0 is the kernel's anonymous devices: tmpfs, NFS, overlayfs, btrfs subvolumes. None has a
    # request queue that io.max could throttle.
    return not mount["device"].startswith("0:")


# -- plan ------------------------------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """What inject would do, what is simulated, and what this machine cannot do. Changes nothing.

    It reads /proc/self/mountinfo to find the volume (and so whether io.max can apply).
    """
    params = check_params(spec)
    name = spec["experiment"]
    node = spec.get("node") or "-"
    actions: List[str] = []
    simulated: List[str] = []
    missing: List[str] = []
    alternatives: List[str] = []
    root = os.geteuid() == 0
    if name == KILL:
        output = params.get("output") or "(the job's StdOut, from scontrol show job %s)" % params["job_id"]
        actions.append("%s: wait up to %gs for a new checkpoint_begin line in %s" % (
            node, params["timeout_s"], output))
        actions.append("%s: scancel --signal=KILL --batch --full %s while that save is being written (SIGKILL "
                       "to the job's processes at once, no grace period)" % (node, params["job_id"]))
        if params["requeue"]:
            actions.append("%s: scontrol requeue %s, as Slurm does after a node loss" % (node, params["job_id"]))
        if spec.get("lab_dir"):
            simulated.append("the node loss: the job's processes get SIGKILL and the job is requeued; the node "
                             "itself stays up")
        return {"actions": actions, "simulated": simulated, "missing": missing}
    mount = volume(params["path"], read_mounts(), params["allow_shared_filesystem"])
    where = "%s (%s %s)" % (mount["mount_point"], mount["fstype"], mount["source"])
    if name == FILL:
        actions.append("%s: allocate %s until fewer than %d bytes are free on %s" % (
            node, filler_path(params["path"], spec.get("fault_id") or "<fault id>"), params["leave_bytes"], where))
        actions.append("%s: rollback deletes that file" % node)
    elif params["mode"] == "cut":
        actions.append("%s: mount -o remount,ro %s (a read-only bind mount on top of it if files are open for "
                       "writing there)" % (node, mount["mount_point"]))
        actions.append("%s: rollback: mount -o remount,rw, or umount of that bind mount" % node)
        alternatives.append(NETWORK_ALTERNATIVE)
        if not root:
            missing.append("root: mount needs CAP_SYS_ADMIN")
    else:
        target = params.get("cgroup") or "the cgroup of job %s" % params["job_id"]
        device = mount["device"] if _has_block_device(mount) else "<no block device>"
        actions.append("%s: write '%s %s' into io.max of %s (a partition counts as its whole disk)" % (
            node, device, io_limits(params["rbps"], params["wbps"]), target))
        actions.append("%s: rollback writes back the line io.max had for that device" % node)
        alternatives.append(NETWORK_ALTERNATIVE)
        if not _has_block_device(mount):
            missing.append("io.max: %s is %s with no block device behind it (device %s), so cgroup v2 cannot "
                           "throttle it" % (params["path"], mount["fstype"], mount["device"]))
        if not root:
            missing.append("root: writing io.max needs it")
        if not io_controller_available():
            missing.append("io.max: this kernel's cgroup v2 offers no io controller (cgroup.controllers)")
    if spec.get("lab_dir"):
        simulated.append("the checkpoint volume is the lab's size-limited tmpfs")
    result: Dict[str, Any] = {"actions": actions, "simulated": simulated, "missing": missing}
    if alternatives:
        result["alternatives"] = alternatives
    return result


def io_controller_available() -> bool:
    """Whether cgroup v2 offers the io controller (the root cgroup's cgroup.controllers lists it)."""
    root = cgroup2_root(read_mounts())
    try:
        with open(os.path.join(root or "/sys/fs/cgroup", "cgroup.controllers")) as handle:
            return "io" in handle.read().split()
    except OSError:
        return False


# -- inject ----------------------------------------------------------------------------------------
def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Do it; return the undo that goes into the ledger. Bad input raises FieldError before any change."""
    params = check_params(spec)
    name = spec["experiment"]
    if name == KILL:
        return _inject_kill(params, ctx)
    fault_id = check_fault_id(spec.get("fault_id"))
    mount = volume(params["path"], read_mounts(), params["allow_shared_filesystem"])
    if name == FILL:
        return _inject_fill(params, fault_id, mount, ctx)
    if params["mode"] == "cut":
        return _inject_cut(params, mount, ctx)
    return _inject_slow(params, mount, ctx)


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Idempotent; ``undo`` is the spec merged with what inject returned (only the spec after a crash
    mid-inject). Returns {"reverted": [what], "already": bool}."""
    name = _experiment(undo)
    if ctx.check_mode:
        return {"reverted": [], "already": False, "check_mode": True}
    if name == KILL:
        return _revert_kill(undo)
    if name == FILL:
        return _revert_fill(undo)
    mode = undo.get("mode") or (undo.get("params") or {}).get("mode") or "cut"
    if mode == "slow":
        return _revert_slow(undo)
    return _revert_cut(undo)


def _run(argv: List[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpufleetError("%s: %s" % (" ".join(argv), exc)) from None
    if done.returncode != 0:
        raise CommandFailed(argv, done.returncode, (done.stderr or done.stdout).strip())
    return done.stdout


class CommandFailed(GpufleetError):
    def __init__(self, argv: List[str], rc: int, stderr: str) -> None:
        super().__init__("%s failed (rc %d): %s" % (" ".join(argv), rc, stderr or "no output"))
        self.argv = argv
        self.rc = rc
        self.stderr = stderr


# -- fill ------------------------------------------------------------------------------------------
def _inject_fill(params: Mapping[str, Any], fault_id: str, mount: Mapping[str, Any],
                 ctx: FaultContext) -> Dict[str, Any]:
    path, leave = params["path"], params["leave_bytes"]
    filler = filler_path(path, fault_id)
    stat = os.statvfs(path)
    undo: Dict[str, Any] = {"experiment": FILL, "path": path, "filler": filler, "leave_bytes": leave,
                            "mount_point": mount["mount_point"], "free_before": free_bytes(stat),
                            "size_bytes": int(stat.f_blocks) * int(stat.f_frsize)}
    if ctx.check_mode:
        undo.update(check_mode=True, bytes=fill_size(undo["free_before"], leave, stat.f_frsize))
        return undo
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        for _round in range(FILL_ROUNDS):
            stat = os.statvfs(path)
            free = free_bytes(stat)
            if below(free, leave):
                break
            _allocate(fd, fill_size(free, leave, stat.f_frsize), int(stat.f_frsize))
        free = free_bytes(os.statvfs(path))
        undo.update(bytes=os.fstat(fd).st_size, free_after=free)
    except BaseException:
        os.close(fd)
        _remove(filler)
        raise
    os.close(fd)
    if not below(free, leave):
        _remove(filler)
        raise GpufleetError("could not fill %s below %d free bytes (%d still free after %d rounds: something frees "
                            "space as fast as it is taken); the filler is removed" % (path, leave, free, FILL_ROUNDS))
    return undo


def _allocate(fd: int, size: int, block: int) -> None:
    """Grow the file by ``size`` bytes of real blocks; when the filesystem refuses that much (others wrote
    meanwhile, or its metadata needs blocks), take what it gives, down to one block."""
    offset = os.fstat(fd).st_size
    while size >= 1:
        try:
            os.posix_fallocate(fd, offset, size)
            return
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            if size <= block:
                return  # full: the caller's statvfs sees it
            size = max(block, (size // 2) // block * block)


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _revert_fill(undo: Mapping[str, Any]) -> Dict[str, Any]:
    filler = undo.get("filler")
    if not filler:
        # Inject crashed before its undo was stored: the name derives from the spec.
        path = (undo.get("params") or {}).get("path")
        if not path or not undo.get("fault_id"):
            return {"reverted": [], "already": True, "note": "no filler recorded"}
        filler = filler_path(os.path.realpath(path), check_fault_id(undo.get("fault_id")))
    if not os.path.basename(filler).startswith(FILL_PREFIX):
        raise GpufleetError("refusing to delete %s: not a chaos filler file" % filler)
    if _remove(filler):
        return {"reverted": ["deleted %s" % filler], "already": False}
    return {"reverted": [], "already": True}


# -- cut -------------------------------------------------------------------------------------------
def _inject_cut(params: Mapping[str, Any], mount: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    point = mount["mount_point"]
    undo: Dict[str, Any] = {"experiment": STORAGE, "mode": "cut", "mountpoint": point, "path": params["path"],
                            "fstype": mount["fstype"], "source": mount["source"], "was_rw": not read_only(mount)}
    if not undo["was_rw"]:
        undo["method"] = None  # already read-only: nothing done, nothing to undo
        return undo
    if ctx.check_mode:
        undo.update(check_mode=True, method="remount")
        return undo
    try:
        _run(["mount", "-o", "remount,ro", point])
        undo["method"] = "remount"
        return undo
    except CommandFailed as exc:
        # The kernel refuses to make a filesystem read-only while files are open for writing on it
        # (EBUSY). A read-only mount stacked on top makes every new open fail with EROFS instead.
        if "busy" not in exc.stderr.lower():
            raise
        undo["remount_refused"] = exc.stderr
    _run(["mount", "--bind", point, point])
    top = stacked(point, read_mounts())[-1]
    try:
        _run(["mount", "-o", "remount,bind,ro", point])
    except GpufleetError:
        _run(["umount", point])
        raise
    undo.update(method="bind", mount_id=top["mount_id"])
    return undo


def _revert_cut(undo: Mapping[str, Any]) -> Dict[str, Any]:
    point = undo.get("mountpoint")
    method = undo.get("method")
    if point is None:
        # Inject crashed before its undo was stored: only a read-only bind mount of the volume on
        # its own mount point is recognisably ours; a volume that is read-only otherwise stays so.
        path = (undo.get("params") or {}).get("path")
        if not path:
            return {"reverted": [], "already": True, "note": "nothing recorded"}
        path = os.path.realpath(path)
        on_point = stacked(path, read_mounts())
        if len(on_point) >= 2 and read_only(on_point[-1]) and on_point[-1]["device"] == on_point[-2]["device"] \
                and not read_only(on_point[-2]):
            _run(["umount", path])
            return {"reverted": ["umount %s (a read-only bind mount left by a crashed inject)" % path],
                    "already": False}
        return {"reverted": [], "already": True, "note": "no read-only bind mount of ours on %s" % path}
    if not undo.get("was_rw", True) or method is None:
        return {"reverted": [], "already": True, "note": "%s was read-only before the drill" % point}
    on_point = stacked(point, read_mounts())
    if method == "bind":
        ours = [mount for mount in on_point if mount["mount_id"] == undo.get("mount_id")]
        if not ours:
            return {"reverted": [], "already": True}
        if on_point[-1]["mount_id"] != undo.get("mount_id"):
            raise GpufleetError("cannot remove the read-only bind mount on %s: something else is mounted on top of it"
                                % point)
        _run(["umount", point])
        return {"reverted": ["umount %s (the read-only bind mount)" % point], "already": False}
    if not on_point:
        return {"reverted": [], "already": True, "note": "%s is not mounted any more" % point}
    if not read_only(on_point[-1]):
        return {"reverted": [], "already": True}
    _run(["mount", "-o", "remount,rw", point])
    return {"reverted": ["mount -o remount,rw %s" % point], "already": False}


# -- slow ------------------------------------------------------------------------------------------
def whole_disk(device: str) -> str:
    """io.max takes whole disks: a partition's MAJ:MIN becomes its disk's (from sysfs)."""
    base = os.path.join(SYS, "dev", "block", device)
    if not os.path.exists(os.path.join(base, "partition")):
        return device
    with open(os.path.join(os.path.realpath(base), "..", "dev")) as handle:
        return handle.read().strip()


def cgroup2_root(mounts: List[Dict[str, Any]]) -> Optional[str]:
    roots = [mount["mount_point"] for mount in mounts if mount["fstype"] == "cgroup2"]
    return roots[0] if roots else None


def find_job_cgroup(root: str, job_id: str, max_depth: int = 5) -> Optional[str]:
    """Slurm's cgroup/v2 plugin puts a job in ``.../job_<id>`` (under slurmstepd.scope); search for it."""
    wanted = "job_%s" % job_id
    level = [root]
    for _depth in range(max_depth):
        nxt = []
        for directory in level:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name == wanted:
                        return entry.path
                    nxt.append(entry.path)
        level = nxt
    return None


def _inject_slow(params: Mapping[str, Any], mount: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    if not _has_block_device(mount):
        raise GpufleetError(
            "missing capability: %s is %s (%s) with no block device behind it (device %s), so cgroup v2 io.max "
            "cannot slow it; use mode cut here, or on a real site netem or a firewall rule towards the storage "
            "endpoint" % (params["path"], mount["fstype"], mount["source"], mount["device"]))
    device = whole_disk(mount["device"])
    mounts = read_mounts()
    cgroup = params.get("cgroup")
    if cgroup is None:
        root = cgroup2_root(mounts)
        if root is None:
            raise GpufleetError("missing capability: no cgroup v2 hierarchy is mounted, so io.max is not available")
        cgroup = find_job_cgroup(root, params["job_id"])
        if cgroup is None:
            raise GpufleetError("no cgroup for job %s under %s: Slurm puts jobs in cgroups of their own only with "
                                "ProctrackType=proctrack/cgroup and cgroup v2; give params.cgroup" % (
                                    params["job_id"], root))
    io_max = os.path.join(cgroup, "io.max")
    if not os.path.exists(io_max):
        raise GpufleetError("missing capability: %s has no io.max: the io controller is not enabled for it (add "
                            "+io to cgroup.subtree_control of its parent)" % cgroup)
    with open(io_max) as handle:
        previous = parse_io_max(handle.read()).get(device)
    line = io_max_line(device, params.get("rbps"), params.get("wbps"))
    undo = {"experiment": STORAGE, "mode": "slow", "cgroup": cgroup, "io_max": io_max, "device": device,
            "previous": previous, "line": line, "path": params["path"]}
    if ctx.check_mode:
        undo["check_mode"] = True
        return undo
    _write_io_max(io_max, line)
    return undo


def _write_io_max(io_max: str, line: str) -> None:
    try:
        with open(io_max, "w") as handle:
            handle.write(line + "\n")
    except OSError as exc:
        raise GpufleetError("cannot write %r to %s: %s" % (line, io_max, exc)) from None


def _revert_slow(undo: Mapping[str, Any]) -> Dict[str, Any]:
    io_max, device = undo.get("io_max"), undo.get("device")
    if not io_max or not device:
        return {"reverted": [], "already": True, "note": "no io.max line recorded"}
    if not os.path.exists(io_max):
        return {"reverted": [], "already": True, "note": "%s is gone (the job ended)" % os.path.dirname(io_max)}
    line = restore_line(device, undo.get("previous"))
    with open(io_max) as handle:
        now = parse_io_max(handle.read()).get(device)
    if now == undo.get("previous") or (not undo.get("previous") and (now is None or now == line)):
        return {"reverted": [], "already": True}
    _write_io_max(io_max, line)
    return {"reverted": ["%s: %s" % (io_max, line)], "already": False}


# -- kill ------------------------------------------------------------------------------------------
def kill_batch(client: AnySlurmClient, job_id: str) -> CommandResult:
    """``scancel --signal=KILL --batch --full <job>``: SIGKILL to every process of the batch step, now."""
    return client.signal_jobs(check_job_ids([job_id], "params.job_id"), signal="KILL", full=True, batch=True)


def job_output(client: AnySlurmClient, job_id: str) -> str:
    """The job's output file, as Slurm has it."""
    try:
        return client.job_stdout(job_id)
    except GpufleetError as exc:
        raise GpufleetError("%s; give params.output" % exc) from None


class _Follower:
    """Reads a growing file from an offset, whole lines only."""

    def __init__(self, path: str, offset: int) -> None:
        self.path = path
        self.offset = offset
        self.partial = ""

    def lines(self) -> List[str]:
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # truncated: a new run of the job rewrote it
                    self.offset, self.partial = 0, ""
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        text = self.partial + chunk.decode("utf-8", "replace")
        lines = text.split("\n")
        self.partial = lines.pop()
        return lines


def _inject_kill(params: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    job_id = params["job_id"]
    client = context_slurm(ctx)
    output = params.get("output") or job_output(client, job_id)
    tracker = SaveTracker()
    try:
        with open(output, "rb") as handle:
            before = handle.read()
    except OSError as exc:
        raise FieldError("params.output", "cannot read the job's output %s: %s" % (output, exc)) from None
    # Only the part before the last newline is history; a half-written last line is read again.
    cut = before.rfind(b"\n") + 1
    for event in parse_events(before[:cut].decode("utf-8", "replace")):
        tracker.feed(event)
    previous = tracker.last_saved
    undo: Dict[str, Any] = {"experiment": KILL, "job_id": job_id, "output": output, "killed_step": None,
                            "previous_checkpoint_step": previous}
    if ctx.check_mode:
        undo["check_mode"] = True
        return undo
    follower = _Follower(output, cut)
    tracker.in_progress = None  # a save begun before the drill started does not count: it must be a new one
    deadline = _clock() + params["timeout_s"]
    while True:
        for line in follower.lines():
            event = parse_event(line)
            if event is not None:
                tracker.feed(event)
        if tracker.in_progress is not None:
            break
        if tracker.ended in ("done", "error"):
            raise GpufleetError("job %s ended (%s) before a new checkpoint save began; nothing killed" % (
                job_id, tracker.ended))
        if _clock() >= deadline:
            raise GpufleetError("no new checkpoint_begin in %s within %gs; nothing killed (is job %s running "
                                "train_sim with a --checkpoint-write-seconds long enough to be caught?)" % (
                                    output, params["timeout_s"], job_id))
        _sleep(params["poll_s"])
    step = tracker.in_progress
    previous = tracker.last_saved
    killed = kill_batch(client, job_id)
    undo.update(killed_step=step, previous_checkpoint_step=previous, killed_at=time.time(),
                commands=[list(killed.argv)])
    # The log says whether the save got to its end before the SIGKILL landed (a race the drill reports).
    for line in follower.lines():
        event = parse_event(line)
        if event is not None:
            tracker.feed(event)
    undo["save_finished_before_kill"] = tracker.finished.get(step) if step is not None else None
    if params["requeue"]:
        undo["commands"].append(_requeue(client, job_id, params["requeue_timeout_s"], params["poll_s"]))
        undo["requeued"] = True
    return undo


def _requeue(client: AnySlurmClient, job_id: str, timeout: float, poll: float) -> List[str]:
    """``scontrol requeue``, retried while slurmctld is still finishing the killed job."""
    deadline = _clock() + timeout
    while True:
        try:
            return list(client.requeue([job_id]).argv)
        except SlurmError as exc:
            jobs = [job for job in client.jobs(states=None) if job.job_id == job_id]
            if jobs and jobs[0].state == "PENDING":
                return ["(job %s is PENDING already: requeued)" % job_id]
            if _clock() >= deadline:
                raise GpufleetError("job %s was killed but not requeued within %gs: %s" % (job_id, timeout, exc)) \
                    from None
        _sleep(max(poll, 0.2))


def _revert_kill(undo: Mapping[str, Any]) -> Dict[str, Any]:
    step = undo.get("killed_step")
    return {"reverted": [], "already": True,
            "note": "job %s was killed%s; it resumes by itself after the requeue, from its previous valid checkpoint"
                    % (undo.get("job_id"), (" while writing the checkpoint of step %s" % step) if step else "")}
