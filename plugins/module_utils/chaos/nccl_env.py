# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NCCL environment family: set NCCL variables for the jobs the target starts, restore them
byte for byte.

One experiment, ``nccl_env`` (``params.vars``: {NCCL_NAME: value}), three backends:

* ``nccl_conf`` - the node's ``/etc/nccl.conf`` (``NAME=value`` lines), which NCCL reads at
  communicator init; a variable the job sets itself wins over the file. The default on a site.
* ``slurm_taskprolog`` - a drop-in of ``export NAME=value`` lines that the site's Slurm
  TaskProlog prints (roles/slurm/templates/task-prolog.j2 is the one the lab runs), and
  slurmstepd applies to every task's environment: it wins over the job's own settings. The
  default in the lab, where it is observed for real: a job started on the target prints them.
* ``pod_env`` - a pod template's env (Kubernetes): planned and documented, not implemented; the
  plan lists it as missing, so the gate refuses the drill before anything changes.

Only jobs started while the fault is active see it: NCCL reads its environment once, at init.
In the lab the files are per node under ``<lab>/nccl/<node>/`` (never the machine's /etc).

The restore is exact. Before the file changes, its previous state (bytes as base64, or its
absence; mode, owner; whether the directory had to be made) goes to a sidecar file beside it, so
a controller killed between the change and the ledger's record of the undo still leaves what
``revert`` needs; the undo in the ledger carries the same record. Both writes are atomic (a
temporary file, fsync, rename). Revert writes the bytes back (or deletes the file it created),
removes the sidecar and a directory it made, and says whether the restored file's sha256 matches.

Where nccl-tests' ``all_reduce_perf`` is installed (``params.nccl_tests`` or the PATH), the bus
bandwidth is measured before and during, and the rollback's actions carry both figures (they reach
the drill report). This runs where chaos_fault runs: on a site, delegate the drill to the node.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments, file_restore, nccl_vars
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import write_atomic
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import burn_output

BACKENDS = ("nccl_conf", "slurm_taskprolog", "pod_env")
LAB_BACKEND, SITE_BACKEND = "slurm_taskprolog", "nccl_conf"
SITE_PATHS = {"nccl_conf": "/etc/nccl.conf", "slurm_taskprolog": "/etc/gpufleet/nccl.env"}
LAB_FILES = {"nccl_conf": "nccl.conf", "slurm_taskprolog": "nccl.env"}
KNOBS = experiments.get("nccl_env").knobs
NCCL_TESTS = "all_reduce_perf"
NCCL_TESTS_ARGS = ["-b", "8M", "-e", "128M", "-f", "2", "-g", "1"]
NCCL_TESTS_TIMEOUT = 300
NEW_FILE_MODE = 0o644  # jobs (any user) read it: NCCL in the job, the TaskProlog as the job's user
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
POD_ENV_MISSING = ("pod_env: setting a pod template's env is not implemented here (a Deployment, StatefulSet or "
                   "Slinky NodeSet template patch restarts the pods it changes); use nccl_conf on the node, or "
                   "slurm_taskprolog")


# -- resolving the spec ------------------------------------------------------------------------------
def _params(spec: Mapping[str, Any]) -> Dict[str, Any]:
    params = dict(spec.get("params") or {})
    for knob in params:
        if knob not in KNOBS:
            raise FieldError("params.%s" % knob, "unknown knob of nccl_env; knobs: %s" % ", ".join(KNOBS))
    params["vars"] = nccl_vars.check_vars(params.get("vars"))
    args = params.get("nccl_tests_args", NCCL_TESTS_ARGS)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise FieldError("params.nccl_tests_args", "a list of all_reduce_perf arguments, e.g. %s" % NCCL_TESTS_ARGS)
    params["nccl_tests_args"] = args
    return params


def _backend(spec: Mapping[str, Any], lab: bool) -> str:
    chosen = spec.get("backend") or "default"
    if chosen == "default":
        return LAB_BACKEND if lab else SITE_BACKEND
    if chosen not in BACKENDS:
        raise FieldError("backend", "unknown NCCL environment backend %r; backends: %s (one at a time)"
                         % (chosen, ", ".join(BACKENDS)))
    return chosen


def _path(spec: Mapping[str, Any], params: Mapping[str, Any], backend: str) -> Optional[str]:
    if backend == "pod_env":
        return None
    if params.get("path"):
        path = str(params["path"])
        if not os.path.isabs(path) or "\n" in path or os.path.basename(path) in ("", ".", ".."):
            raise FieldError("params.path", "an absolute file path, got %r" % path)
        return os.path.normpath(path)
    lab_dir = spec.get("lab_dir")
    if not lab_dir:
        return SITE_PATHS[backend]
    node = str(spec.get("node") or "")
    if not _NODE.fullmatch(node):
        raise FieldError("target", "%r cannot name a directory of the lab" % node)
    return os.path.join(lab_dir, "nccl", node, LAB_FILES[backend])


def _nccl_tests(params: Mapping[str, Any]) -> Optional[str]:
    given = params.get("nccl_tests")
    found = str(given) if given else shutil.which(NCCL_TESTS)
    return found if found and os.path.isfile(found) and os.access(found, os.X_OK) else None


def _measuring(params: Mapping[str, Any]) -> Optional[str]:
    return _nccl_tests(params) if params.get("measure", True) else None


# -- the family interface ----------------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    lab = bool(spec.get("lab_dir"))
    params = _params(spec)
    backend = _backend(spec, lab)
    node, wanted = spec["node"], params["vars"]
    settings = ", ".join("%s=%s" % kv for kv in wanted.items())
    actions: List[str] = []
    missing: List[str] = []
    simulated: List[str] = []
    if backend == "pod_env":
        missing.append(POD_ENV_MISSING)
        actions.append("%s: set %s in the env of the pods on the node (not implemented)" % (node, settings))
    else:
        path = _path(spec, params, backend)
        now = file_restore.state(path)
        how = ("as `export` lines: the Slurm TaskProlog prints them and slurmstepd puts them in every task's "
               "environment, over the job's own" if backend == "slurm_taskprolog" else
               "as NAME=value lines: NCCL reads the file at init; a variable the job sets itself wins")
        actions.append("%s: set %s in %s %s" % (node, settings, path, how))
        actions.append("%s: keep %s's previous state (%s) for a byte-identical restore; the rollback writes it back"
                       % (node, path, "absent: the rollback deletes it" if not now["existed"] else
                          "%d bytes, sha256 %s" % (now["size"], now["sha256"][:12])))
        actions.append("%s: only jobs started during the drill see it (NCCL reads its environment at init); check: "
                       "sbatch -w %s --wrap 'env | grep ^NCCL_'" % (node, node))
        if lab:
            simulated.append("no NCCL runs in the lab: the variables reach the environment of the jobs started on "
                             "the node (TaskProlog) or the per-node nccl.conf, and nothing consumes them")
    tests = _measuring(params)
    actions.append("%s: bus bandwidth before and during: %s" % (node, " ".join([tests] + params["nccl_tests_args"]))
                   if tests else "%s: bandwidth not measured: %s not found (params.nccl_tests or the PATH)"
                   % (node, NCCL_TESTS) if params.get("measure", True) else
                   "%s: bandwidth not measured (params.measure is false)" % node)
    return {"actions": actions, "simulated": simulated, "missing": missing, "backends": [backend],
            "params": params, "resolved": {}}


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    lab = bool(ctx.lab_dir or spec.get("lab_dir"))
    params = _params(spec)
    backend = _backend(spec, lab)
    if backend == "pod_env":
        raise FieldError("backend", POD_ENV_MISSING)
    path = _path(dict(spec, lab_dir=spec.get("lab_dir") or ctx.lab_dir), params, backend)
    sidecar = file_restore.sidecar_path(path, spec.get("fault_id"))
    tests = _measuring(params)
    bandwidth: Dict[str, Any] = {}
    if tests:
        bandwidth["before"] = _measure(tests, params["nccl_tests_args"], {})
    directory = os.path.dirname(path)
    made_dir = not os.path.isdir(directory)
    if made_dir:
        os.makedirs(directory, mode=0o755)
    previous = file_restore.state(path, with_content=True)
    previous["made_dir"] = made_dir
    content = nccl_vars.merge(file_restore.content(previous), params["vars"], export=backend == "slurm_taskprolog")
    # First the record of what was there (and of what the drill writes, so that the rollback can
    # tell its own bytes from someone else's), then the change: a kill between the two leaves both.
    previous["written_sha256"] = hashlib.sha256(content).hexdigest()
    file_restore.write_sidecar(sidecar, previous)
    if previous["existed"]:
        write_atomic(path, content, previous["mode"], previous["uid"], previous["gid"])
    else:
        write_atomic(path, content, NEW_FILE_MODE, None, None)
    if tests:
        bandwidth["during"] = _measure(tests, params["nccl_tests_args"], params["vars"])
    return {"backend": backend, "path": path, "sidecar": sidecar, "previous": previous, "vars": params["vars"],
            "written_sha256": hashlib.sha256(content).hexdigest(), "bandwidth": bandwidth}


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """``undo`` is the spec merged with what inject returned (only the spec after a crash mid-inject:
    then the sidecar has the previous state, or, without one, the file was never touched)."""
    reverted: List[str] = []
    if "path" in undo:
        path, sidecar = undo["path"], undo["sidecar"]
    else:
        lab_dir = undo.get("lab_dir") or ctx.lab_dir
        backend = _backend(undo, bool(lab_dir))
        if backend == "pod_env":
            return {"reverted": [], "already": True}
        path = _path(dict(undo, lab_dir=lab_dir), dict(undo.get("params") or {}), backend)
        sidecar = file_restore.sidecar_path(path, undo.get("fault_id"))
    previous = undo.get("previous") or file_restore.read_sidecar(sidecar)
    if previous is None:
        return {"reverted": [], "already": True}  # killed before the sidecar: nothing was changed
    settled = file_restore.settle(path, previous, undo.get("written_sha256") or previous.get("written_sha256"),
                                  undo.get("fault_id"))
    if settled["action"] != "already":
        reverted.append(settled["message"])
    file_restore.unlink(sidecar)
    if previous.get("made_dir"):
        try:
            os.rmdir(os.path.dirname(path))
            reverted.append("removed the directory %s (made by the drill)" % os.path.dirname(path))
        except OSError:
            pass  # something else put a file there since: keep it
    bandwidth = undo.get("bandwidth") or {}
    if bandwidth:
        reverted.append(nccl_vars.describe_bandwidth(_avg(bandwidth.get("before")), _avg(bandwidth.get("during"))))
    return {"reverted": reverted, "already": not reverted}


# -- nccl-tests --------------------------------------------------------------------------------------
def _measure(binary: str, args: List[str], extra_env: Mapping[str, str]) -> Dict[str, Any]:
    """One all_reduce_perf run; a failure is a figure missing from the report, never a failed drill."""
    env = dict(os.environ)
    env.update(extra_env)
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True, env=env,
                              timeout=NCCL_TESTS_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    parsed = burn_output.parse_all_reduce_perf(done.stdout)
    result = {"rc": done.returncode, "avg_busbw_gbps": parsed["avg_busbw_gbps"],
              "out_of_bounds": parsed["out_of_bounds"]}
    if done.returncode != 0:
        result["error"] = (done.stderr or done.stdout).strip()[-300:]
    return result


def _avg(measured: Optional[Mapping[str, Any]]) -> Optional[float]:
    return (measured or {}).get("avg_busbw_gbps")
