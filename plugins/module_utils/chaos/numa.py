# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NUMA chaos family: a bounded load beside the protected job, removed at rollback.

Three experiments (numa_plan.py builds their command lines):

* ``numa_remote_memory`` - ``numactl --cpunodebind=<near> --membind=<far> stress-ng --vm ...``: a
  job whose CPUs sit on one NUMA node and whose memory sits on the farthest one (the largest
  distance in ``numactl --hardware``), so its memory traffic crosses the interconnect.
* ``numa_memory_pressure`` - ``stress-ng --vm`` bound (CPUs and memory) to one node, holding a share
  of that node's free memory: the protected job's local allocations spill or reclaim.
* ``cpu_saturation`` - ``stress-ng --cpu N --cpu-load P``.

Every load is bounded twice: stress-ng's ``--timeout`` and an outer ``timeout -k``; as a Slurm job
it also has ``--time``. Two ways to run it (``params.via``):

* ``slurm`` (the default) - ``sbatch -w <node> --job-name=gpufleet-chaos-numa-<fault id> --wrap``;
  the rollback cancels the job id and any job of that name (a crash between sbatch and the ledger
  still leaves the name), then waits until Slurm no longer lists it as active.
* ``process`` - a process group started here, for a drill delegated to the node: its pid and
  kernel start time go to a state file *before* the ledger hears of it; the rollback kills the
  group only if /proc still shows that start time (a reused pid is somebody else's).

The topology is read with ``numactl --hardware`` where this runs (the lab: the same machine; on a
site, delegate the drill to the node, or give params.near_node/far_node). With one NUMA node the
remote-memory experiment binds to the local node and says so (``simulated``).

The kubelet's Topology Manager policy (params.topology_manager_policy, optionally
params.topology_manager_scope) needs params.allow_kubelet_change, and goes with any of the three
experiments. inject edits the KubeletConfiguration file (params.kubelet_config, default
/var/lib/kubelet/config.yaml: PyYAML, the whole document; a file that is missing or not a
KubeletConfiguration mapping is refused) and restarts the kubelet (params.kubelet_restart, default
``systemctl restart kubelet``); then it starts the load. Before the file changes, its previous
bytes go to a sidecar beside it (file_restore.py, shared with nccl_env): revert writes them back
byte for byte (comments and a key that was absent included) and restarts the kubelet again, from
the sidecar alone after a crash mid-inject. In the lab (kwok) there is no kubelet: the plan lists
it as missing unless params.kubelet_config names a file, which is then edited for real (the unit
tests do so, with a harmless restart command).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import file_restore, numa_plan
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext, context_slurm
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.numa_plan import Load, Topology
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import write_atomic
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_job_ids
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import AnySlurmClient

EXPERIMENTS = numa_plan.EXPERIMENTS
STATE_DIR = "/run/gpufleet-chaos"
# How long inject waits to see the load job RUNNING, and revert to see it gone.
START_WAIT_S = 20.0
GONE_WAIT_S = 20.0
KUBELET_MISSING_LAB = "topology_manager_policy: no kubelet in the lab (kwok)"
KUBELET_RESTART_TIMEOUT = 120


# -- topology --------------------------------------------------------------------------------------
def read_topology() -> Optional[Topology]:
    """``numactl --hardware`` here, or None when numactl is missing or says nothing usable."""
    binary = shutil.which("numactl")
    if not binary:
        return None
    try:
        done = subprocess.run([binary, "--hardware"], capture_output=True, text=True, timeout=10, check=False)
        return numa_plan.parse_hardware(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def _missing(load: Load, lab: bool, topology: Optional[Topology]) -> List[str]:
    missing = []
    local = lab or load.via == "process"  # the load runs on this machine: its tools must be here
    if local and not shutil.which("stress-ng"):
        missing.append("stress-ng is not installed (apt-get install stress-ng)")
    if local and load.experiment != numa_plan.CPU and topology is None:
        missing.append("numactl is not installed or lists no NUMA node (apt-get install numactl)")
    path = _kubelet_path(load, lab)
    if load.topology_manager_policy is not None and path is None:
        missing.append(KUBELET_MISSING_LAB)
    elif path is not None:
        try:
            _kubelet_doc(path)
        except FieldError as exc:
            missing.append("kubelet_config: %s" % exc.message)
    return missing


# -- the family interface ----------------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    lab = bool(spec.get("lab_dir"))
    load = numa_plan.check(spec, lab)
    topology = read_topology()
    where = numa_plan.placement(load, topology)
    argv = numa_plan.command(load, topology)
    node = load.node
    actions = []
    if topology is not None:
        actions.append("%s: NUMA topology (numactl --hardware where this runs): %d node(s) %s, distances %s"
                       % (node, len(topology.nodes), list(topology.nodes),
                          {n: dict(row) for n, row in topology.distances.items()}))
    if where["mem_node"] is not None:
        actions.append("%s: CPUs on NUMA node %s, memory on NUMA node %s"
                       % (node, where["cpu_node"], where["mem_node"]))
    if load.via == "slurm":
        actions.append("%s: submit %s as a Slurm job beside the protected job: sbatch -w %s --time=%d "
                       "--job-name=%s --wrap %s" % (node, numa_plan.describe(load), node, load.minutes,
                                                    load.job_name, shlex.quote(shlex.join(argv))))
        actions.append("rollback: scancel the job and any job named %s (an ended job is fine), then wait until "
                       "Slurm lists it no more" % load.job_name)
    else:
        what = numa_plan.describe(load)
        actions.append("%s: start %s as a process group here: %s" % (node, what, shlex.join(argv)))
        actions.append("rollback: kill the process group whose pid and start time were recorded")
    actions.append("%s: bounded by stress-ng --timeout %ds and timeout --foreground -k %d %d" % (
        node, load.seconds, numa_plan.KILL_AFTER_S, load.seconds + numa_plan.OUTER_MARGIN_S))
    kubelet = _kubelet_path(load, lab)
    if kubelet is not None:
        actions.append("%s: set topologyManagerPolicy: %s%s in %s (first its bytes go to a sidecar beside it), "
                       "then restart the kubelet: %s (running pods stay; new pods are admitted under the policy)"
                       % (node, load.topology_manager_policy,
                          " and topologyManagerScope: %s" % load.topology_manager_scope
                          if load.topology_manager_scope else "", kubelet, shlex.join(load.kubelet_restart)))
        actions.append("rollback: write %s back byte for byte, then restart the kubelet again" % kubelet)
    simulated = list(where["simulated"])
    # The role's dry run prints the actions only: say there what this machine cannot do.
    actions += ["%s: simulated: %s" % (node, text) for text in simulated]
    return {"actions": actions, "simulated": simulated, "missing": _missing(load, lab, topology),
            "backends": [load.via], "params": {}, "resolved": {}}


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Start the load; every check runs before it starts."""
    lab = bool(ctx.lab_dir or spec.get("lab_dir"))
    load = numa_plan.check(spec, lab)
    topology = read_topology()
    missing = _missing(load, lab, topology)
    kubelet = _kubelet_path(load, lab)
    if kubelet is not None:
        _kubelet_doc(kubelet)  # FieldError naming params.kubelet_config
    if missing:
        raise FieldError("params.topology_manager_policy" if load.topology_manager_policy else "experiment",
                         "; ".join(missing))
    argv = numa_plan.command(load, topology)
    changed: Dict[str, Any] = {}
    if kubelet is not None:
        changed = _inject_kubelet(load, kubelet, ctx)
    try:
        undo = _inject_slurm(load, argv, ctx) if load.via == "slurm" else _inject_process(load, argv, ctx)
    except BaseException:
        if changed.get("ran"):
            with contextlib.suppress(Exception):
                _revert_kubelet(changed, ctx)  # the load never started: leave the kubelet as it was
        raise
    if changed:
        undo["kubelet"] = changed
    return undo


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Stop the load; idempotent. ``undo`` may be the spec alone (a crash mid-inject): the job name
    and the state file derive from the fault id."""
    via = undo.get("via") or (undo.get("params") or {}).get("via") or "slurm"
    if via == "slurm":
        done = _revert_slurm(undo, ctx)
    elif via == "process":
        done = _revert_process(undo, ctx)
    else:
        raise FieldError("params.via", "must be one of %s, not %r" % (", ".join(numa_plan.VIAS), via))
    kubelet = undo.get("kubelet") or _kubelet_from_spec(undo, ctx)
    if kubelet:
        done["reverted"] = list(done["reverted"]) + _revert_kubelet(kubelet, ctx)
        done["already"] = not done["reverted"]
    return done


# -- the kubelet's Topology Manager --------------------------------------------------------------------
def _kubelet_path(load: Load, lab: bool) -> Optional[str]:
    """The KubeletConfiguration file to edit, or None: no kubelet change, or the lab without a file."""
    if load.topology_manager_policy is None:
        return None
    if load.kubelet_config:
        return load.kubelet_config
    return None if lab else numa_plan.KUBELET_CONFIG


def _kubelet_doc(path: str) -> Dict[str, Any]:
    import yaml

    try:
        with open(path, "rb") as handle:
            doc = yaml.safe_load(handle.read())
    except FileNotFoundError as exc:
        raise FieldError("params.kubelet_config", "%s does not exist (no kubelet configured here?)" % path) from exc
    except OSError as exc:
        raise FieldError("params.kubelet_config", "%s: cannot read: %s" % (path, exc.strerror or exc)) from exc
    except yaml.YAMLError as exc:
        raise FieldError("params.kubelet_config", "%s: not valid YAML: %s" % (path, exc)) from exc
    if not isinstance(doc, dict) or doc.get("kind") != "KubeletConfiguration":
        raise FieldError("params.kubelet_config", "%s is not a KubeletConfiguration (a mapping with kind: "
                         "KubeletConfiguration)" % path)
    return doc


def _edited(load: Load, doc: Dict[str, Any]) -> bytes:
    import yaml

    doc = dict(doc, topologyManagerPolicy=load.topology_manager_policy)
    if load.topology_manager_scope:
        doc["topologyManagerScope"] = load.topology_manager_scope
    return yaml.safe_dump(doc, default_flow_style=False, sort_keys=False).encode()


def _restart_kubelet(argv: List[str]) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=KUBELET_RESTART_TIMEOUT,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpufleetError("restarting the kubelet (%s) failed: %s" % (shlex.join(argv), exc)) from exc
    if done.returncode != 0:
        raise GpufleetError("restarting the kubelet (%s) failed: rc %d: %s" % (
            shlex.join(argv), done.returncode, (done.stderr or done.stdout).strip()[-300:]))
    return shlex.join(argv)


def _inject_kubelet(load: Load, path: str, ctx: FaultContext) -> Dict[str, Any]:
    sidecar = file_restore.sidecar_path(path, load.fault_id)
    record: Dict[str, Any] = {"path": path, "sidecar": sidecar, "restart": list(load.kubelet_restart),
                              "fault_id": load.fault_id,
                              "policy": load.topology_manager_policy, "scope": load.topology_manager_scope}
    if ctx.check_mode:
        return dict(record, ran=False)
    content = _edited(load, _kubelet_doc(path))
    previous = file_restore.state(path, with_content=True)
    # First the record of what was there (and of what the drill writes, so that the rollback can
    # tell its own bytes from someone else's), then the change: a kill between the two leaves both.
    previous["written_sha256"] = hashlib.sha256(content).hexdigest()
    file_restore.write_sidecar(sidecar, previous)
    write_atomic(path, content, previous["mode"], previous["uid"], previous["gid"])
    record.update(ran=True, previous=previous, written_sha256=hashlib.sha256(content).hexdigest())
    try:
        _restart_kubelet(record["restart"])
    except GpufleetError:
        with contextlib.suppress(GpufleetError):
            _revert_kubelet(record, ctx)  # the file goes back; a kept sidecar lets the rollback retry
        raise
    return record


def _kubelet_from_spec(undo: Mapping[str, Any], ctx: FaultContext) -> Optional[Dict[str, Any]]:
    """After a crash mid-inject the ledger has the spec alone: the sidecar says what to restore."""
    params = undo.get("params") or {}
    if not isinstance(params, Mapping) or params.get("topology_manager_policy") is None:
        return None
    lab = bool(undo.get("lab_dir") or ctx.lab_dir)
    path = params.get("kubelet_config") or (None if lab else numa_plan.KUBELET_CONFIG)
    if not path:
        return None
    path = os.path.normpath(str(path))
    restart = params.get("kubelet_restart") or list(numa_plan.KUBELET_RESTART)
    return {"path": path, "sidecar": file_restore.sidecar_path(path, undo.get("fault_id")), "restart": list(restart),
            "fault_id": undo.get("fault_id"),
            "ran": True}


def _revert_kubelet(record: Mapping[str, Any], ctx: FaultContext) -> List[str]:
    """Write the pre-drill bytes back and restart the kubelet; nothing when nothing was changed."""
    if not record.get("ran") or ctx.check_mode:
        return []
    path, sidecar = record["path"], record["sidecar"]
    pending = file_restore.read_sidecar(sidecar)
    previous = record.get("previous") or pending
    if previous is None:
        return []  # killed before the sidecar: the file was never touched
    now = file_restore.state(path)
    if pending is None and now.get("sha256") == previous.get("sha256"):
        return []  # restored already (the sidecar goes last)
    settled = file_restore.settle(path, previous, record.get("written_sha256") or previous.get("written_sha256"),
                                  record.get("fault_id"))
    reverted: List[str] = [settled["message"]]
    if settled["action"] != "already":
        restart = record.get("restart") or list(numa_plan.KUBELET_RESTART)
        reverted.append("restarted the kubelet: %s" % _restart_kubelet(restart))
    file_restore.unlink(sidecar)
    return reverted


# -- via slurm ------------------------------------------------------------------------------------
def _inject_slurm(load: Load, argv: List[str], ctx: FaultContext) -> Dict[str, Any]:
    client = context_slurm(ctx)
    job_id, result = client.submit(BatchJob(name=load.job_name, node=load.node, command=tuple(argv),
                                            minutes=load.minutes, output=load.output))
    undo = {"via": "slurm", "job_id": job_id, "job_name": load.job_name, "node": load.node,
            "command": list(result.argv)}
    if job_id:
        # The observation: the load job RUNNING on the target beside the protected job.
        deadline = time.time() + START_WAIT_S
        while time.time() < deadline:
            job = next((j for j in client.jobs() if j.job_id == job_id), None)
            if job is not None and job.state != "PENDING":
                undo["seen"] = {"state": job.state, "nodes": list(job.nodes), "at": time.time()}
                break
            time.sleep(0.5)
        else:
            undo["seen"] = {"state": "PENDING", "nodes": [], "at": time.time()}
    return undo


def _revert_slurm(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    client = context_slurm(ctx)
    name = undo.get("job_name") or numa_plan.JOB_PREFIX + str(undo.get("fault_id"))
    ids = check_job_ids([undo["job_id"]], field="job_id") if undo.get("job_id") else []
    listed = {j.job_id: j for j in client.jobs() if j.name == name or j.job_id in ids}
    ids += [job_id for job_id in listed if job_id not in ids]
    reverted: List[str] = []
    observed: Dict[str, Any] = {}
    for one in ids:
        job = listed.get(one)
        if job is not None:
            observed[one] = {"state_at_rollback": job.state, "nodes": list(job.nodes)}
        if job is None or not job.active:
            continue  # it ended on its own (its time bound): nothing to stop
        result = client.cancel_unless_gone(one)
        if result is None:
            continue  # it ended on its own: nothing to stop
        reverted.append("%s the load job %s (%s, was %s on %s)" % (
            "cancelled" if result.ran else "would cancel", one, shlex.join(result.argv), job.state,
            ",".join(job.nodes) or "?"))
    if reverted and not ctx.check_mode:
        _wait_gone(client, ids)
    if undo.get("seen"):
        observed["at_inject"] = undo["seen"]
    done: Dict[str, Any] = {"reverted": reverted, "already": not reverted}
    if observed:
        done["observed"] = observed
    return done


def _wait_gone(client: AnySlurmClient, ids: List[str]) -> None:
    """scancel returns at once; the job's processes end a moment later (COMPLETING)."""
    deadline = time.time() + GONE_WAIT_S
    while time.time() < deadline:
        if not any(j.active for j in client.jobs() if j.job_id in ids):
            return
        time.sleep(0.5)
    raise GpufleetError("the load job(s) %s are still active %.0f s after scancel" % (",".join(ids), GONE_WAIT_S))


# -- via a process ----------------------------------------------------------------------------------
def _state_file(lab_dir: Optional[str], fault_id: Any) -> str:
    if not isinstance(fault_id, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", fault_id):
        raise FieldError("fault_id", "not a fault id: %r" % (fault_id,))
    base = os.path.join(str(lab_dir), "numa") if lab_dir else STATE_DIR
    return os.path.join(base, "numa-%s.json" % fault_id)


def start_time(pid: int) -> Optional[str]:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot): with the pid, names one process."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _inject_process(load: Load, argv: List[str], ctx: FaultContext) -> Dict[str, Any]:
    path = _state_file(ctx.lab_dir, load.fault_id)
    if ctx.check_mode:
        return {"via": "process", "state_file": path, "command": argv, "ran": False}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(load.output, "ab") as out:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    record = {"via": "process", "pid": child.pid, "start_time": start_time(child.pid), "state_file": path,
              "command": argv}
    with open(path, "w") as handle:
        json.dump(record, handle)
    return record


def _revert_process(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    path = undo.get("state_file") or _state_file(ctx.lab_dir or undo.get("lab_dir"),
                                                 undo.get("fault_id"))
    record = dict(undo) if undo.get("pid") else _read(path)
    reverted: List[str] = []
    if record and record.get("pid") and not ctx.check_mode:
        pid = int(record["pid"])
        if record.get("start_time") and start_time(pid) == record["start_time"]:
            _kill_group(pid)
            reverted.append("killed the load's process group %d (%s)" % (pid, shlex.join(record.get("command") or [])))
    if not ctx.check_mode:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return {"reverted": reverted, "already": not reverted}


def _kill_group(pid: int) -> None:
    """SIGTERM to the group (timeout passes it to stress-ng), SIGKILL after 5 s; reap our own child."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.time() + wait
        while time.time() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not os.path.exists("/proc/%d" % pid) or _zombie(pid):
                return
            time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _read(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
