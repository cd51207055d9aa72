# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The burn family: a GPU burn (gpu-burn, or ``dcgmi diag -r 3``) as a noisy neighbour beside the
protected job. One experiment, ``gpu_burn``, three ways to run it (``params.via``):

* ``slurm`` - ``sbatch --parsable -w <node> --gres=gpu:<n> --time=<min> --wrap '<burn>'``; the undo
  is the job id, the rollback ``scancel``. Slurm chooses which of the node's GPUs the job gets;
  the GPU indices only give the count.
* ``kubernetes`` - a Pod pinned with ``spec.nodeName`` (the scheduler, and so a cordon, is
  bypassed), ``nvidia.com/gpu`` limits, ``activeDeadlineSeconds`` as its own time limit; the
  rollback deletes it.
* ``lab`` - the lab's GPUs are simulated, so the burn's effect is written into their fake NVML
  state: utilization, temperature, power, memory use, and the SW power-cap throttle reason that
  stands for the clocks coming down (the fake NVML has no clock field). The previous values are
  saved and restored exactly. With ``neighbour_job`` a real Slurm job (``sleep``) also holds GPUs
  on the node, so Slurm sees the neighbour too.

Every way has a time limit of its own (Slurm ``--time``, the Pod's deadline, the drill's rollback),
so a burn ends even when nobody comes back. Rollback works from the spec alone after a crash
mid-inject: the job and Pod names derive from the fault id, and the lab writes its saved values to
a journal file *before* it changes a GPU.

Reading the burn's output (gpu-burn's and ``dcgmi diag``'s) is ``health/burn_output.py``: pure parsers,
shared with the remediation's validation burn.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext, context_slurm
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import bool_param, int_param
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import fault_id as check_fault_id
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import read_tail
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import burn_output
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.burn_output import TOOLS
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    TransportError,
    api_failure,
    core_v1,
    unreachable,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.quarantine import DEFAULT_TAINT_KEY
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import SBATCH_OPTIONS, BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_job_ids, check_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import AnySlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

FAMILY = "burn"
EXPERIMENT = "gpu_burn"
EXPERIMENTS = (EXPERIMENT,)
VIAS = ("slurm", "kubernetes", "lab")
PARAMS = experiments.get(EXPERIMENT).knobs
MAX_SECONDS = 86400
# gpu-burn spends a while allocating memory before the timed burn starts; the scheduler's limit
# (Slurm --time, the Pod's activeDeadlineSeconds) is the burn plus this, so it ends a hung burn,
# not a normal one.
START_MARGIN_S = 60
DEFAULT_MEMORY_PERCENT = 90
DEFAULT_NAMESPACE = "gpufleet-chaos"
NAME_PREFIX = "gpufleet-chaos-burn-"
FAULT_LABEL = "gpufleet.io/chaos-fault"
EXPERIMENT_LABEL = "gpufleet.io/chaos-experiment"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet.resilience"}
GPU_RESOURCE = "nvidia.com/gpu"
# GPU nodes often carry the device plugin's nvidia.com/gpu taint, and a drill may run on a node
# the remediation has just quarantined: the burn tolerates both (NoExecute included, so it is not
# evicted halfway).
TOLERATIONS = ({"key": DEFAULT_TAINT_KEY, "operator": "Exists"}, {"key": GPU_RESOURCE, "operator": "Exists"})
# A short grace: the rollback should end the burn now, and gpu-burn has nothing to save.
POD_GRACE_S = 5

# What a full-power burn looks like on an H100/H200-class GPU, written into the fake NVML state.
SW_POWER_CAP = experiments.SW_POWER_CAP  # nvmlClocksEventReasonSwPowerCap
LAB_BURN = {"utilization_gpu": 100, "utilization_memory": 60, "temperature": 83, "power_mw": 690000}
SAVED_FIELDS = ("utilization_gpu", "utilization_memory", "temperature", "power_mw", "memory_used", "throttle_reasons")

_IMAGE = re.compile(r"[^\s]+")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Burn:
    """A checked gpu_burn spec."""

    node: str
    fault_id: str
    seconds: int
    gpus: Optional[Tuple[int, ...]]  # None: every GPU of the node
    via: str
    tool: str
    memory_percent: int
    tensor_cores: bool
    neighbour_job: bool
    namespace: str
    image: Optional[str]
    output: str

    @property
    def job_name(self) -> str:
        return NAME_PREFIX + self.fault_id

    @property
    def pod_name(self) -> str:
        return pod_name(self.fault_id)

    @property
    def minutes(self) -> int:
        """Slurm's --time: whole minutes, the burn and its start-up margin."""
        return math.ceil((self.seconds + START_MARGIN_S) / 60.0)

    def as_params(self) -> Dict[str, Any]:
        return {"seconds": self.seconds, "gpus": "all" if self.gpus is None else list(self.gpus), "via": self.via,
                "tool": self.tool, "memory_percent": self.memory_percent, "tensor_cores": self.tensor_cores,
                "neighbour_job": self.neighbour_job, "namespace": self.namespace, "image": self.image,
                "output": self.output}


# -- checking the spec ---------------------------------------------------------------------------
def check_spec(spec: Mapping[str, Any], lab: Optional[bool] = None, namespace: Optional[str] = None) -> Burn:
    """The spec as a Burn; FieldError (``params.<name>``, ``target``, ``fault_id``) on bad input.

    ``lab``: whether this runs in the lab (ctx lab_dir); it picks the default ``via`` when neither
    params.via nor the spec's backend names one. None: the spec's own ``lab_dir``, if any.
    ``namespace``: the Pod's namespace when params has none (ctx namespace, the drill's chaos namespace).
    """
    if not isinstance(spec, Mapping):
        raise FieldError("spec", "must be a mapping, got %r" % (spec,))
    if spec.get("experiment", EXPERIMENT) != EXPERIMENT:
        raise FieldError("experiment", "the burn family runs %s, not %r" % (EXPERIMENT, spec.get("experiment")))
    node = check_node(spec.get("node"), "target")
    fault_id = check_fault_id(spec.get("fault_id"), label=True)  # a Slurm job name, a Pod name, a label
    given = spec.get("params") or {}
    if not isinstance(given, Mapping):
        raise FieldError("params", "must be a mapping, got %r" % (given,))
    unknown = sorted(str(name) for name in given if name not in PARAMS)
    if unknown:
        raise FieldError("params.%s" % unknown[0], "unknown parameter of %s; parameters: %s"
                         % (EXPERIMENT, ", ".join(PARAMS)))
    # The registry's defaults, except via: its default depends on lab or site, below.
    params = {k: v for k, v in experiments.get(EXPERIMENT).params.items() if k != "via"}
    params.update(given)
    if lab is None:
        lab = bool(spec.get("lab_dir"))
    via = _via(given.get("via"), spec.get("backend"), lab)
    tool = params.get("tool", "gpu_burn")
    if tool not in TOOLS:
        raise FieldError("params.tool", "must be one of %s, not %r" % (", ".join(TOOLS), tool))
    if tool != "gpu_burn":
        for name in ("memory_percent", "tensor_cores"):
            if name in given:
                raise FieldError("params.%s" % name, "is a gpu_burn option (-m, -tc); tool %s has none" % tool)
    neighbour = bool_param(params, "neighbour_job", False)
    if neighbour and via != "lab":
        raise FieldError("params.neighbour_job", "is for via lab, whose burn is simulated; via %s runs a real "
                         "burn job already" % via)
    for name in ("namespace", "image"):
        if name in given and via != "kubernetes":
            raise FieldError("params.%s" % name, "is for via kubernetes only")
    namespace = params.get("namespace", namespace or DEFAULT_NAMESPACE)
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise FieldError("params.namespace", "must be a Kubernetes namespace name, not %r" % (namespace,))
    image = params.get("image")
    if via == "kubernetes" and (not isinstance(image, str) or not _IMAGE.fullmatch(image)):
        # No default image: the burn runs whatever the image's gpu_burn or dcgmi is, so the site picks it.
        raise FieldError("params.image", "is required with via kubernetes: an image that has %s on its PATH"
                         % ("gpu_burn" if tool == "gpu_burn" else "dcgmi"))
    output = params.get("output", "/tmp/%s%s.out" % (NAME_PREFIX, fault_id))
    if "output" in given and via != "slurm":
        raise FieldError("params.output", "is for via slurm only (the burn job's --output file)")
    if not isinstance(output, str) or not output.startswith("/") or "\n" in output:
        raise FieldError("params.output", "must be an absolute path on the node, not %r" % (output,))
    return Burn(
        node=node,
        fault_id=fault_id,
        seconds=int_param(params, "seconds", 1, MAX_SECONDS, None),
        gpus=_gpus(params.get("gpus", "all")),
        via=via,
        tool=tool,
        memory_percent=int_param(params, "memory_percent", 1, 100, DEFAULT_MEMORY_PERCENT),
        tensor_cores=bool_param(params, "tensor_cores", False),
        neighbour_job=neighbour,
        namespace=namespace,
        image=image if via == "kubernetes" else None,
        output=output,
    )


def _via(given: Any, backend: Any, lab: bool) -> str:
    if given is not None:
        if given not in VIAS:
            raise FieldError("params.via", "must be one of %s, not %r" % (", ".join(VIAS), given))
        return str(given)
    if backend in VIAS:
        return str(backend)
    if backend not in (None, "", "default"):
        raise FieldError("backend", "the burn family runs via %s, not %r" % (", ".join(VIAS), backend))
    experiment = experiments.get(EXPERIMENT)
    defaults = experiment.lab_backends if lab else experiment.site_backends
    return defaults[0] if defaults and defaults[0] in VIAS else ("lab" if lab else "slurm")


def _gpus(value: Any) -> Optional[Tuple[int, ...]]:
    if value is None or value == "all":
        return None
    if isinstance(value, (str, int)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise FieldError("params.gpus", "must be 'all' or a non-empty list of GPU indices, got %r" % (value,))
    indices: List[int] = []
    for item in value:
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item)
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= 1023:
            raise FieldError("params.gpus", "must be 'all' or GPU indices (0, 1, ...), got %r" % (item,))
        if item in indices:
            raise FieldError("params.gpus", "lists GPU %d twice" % item)
        indices.append(item)
    return tuple(sorted(indices))


def pod_name(fault_id: str) -> str:
    """A DNS-1123 name from the fault id (lower case; '.' and '_' become '-')."""
    name = re.sub(r"[^a-z0-9-]", "-", (NAME_PREFIX + fault_id).lower())[:63]
    return name.rstrip("-")


# -- the commands and the manifest (pure) ----------------------------------------------------------
def burn_command(burn: Burn) -> List[str]:
    """``gpu_burn -d [-tc] -m 90% <seconds>`` (doubles, tensor cores, share of GPU memory), or
    ``dcgmi diag -r 3`` (DCGM's long suite, normally about 15 minutes)."""
    if burn.tool == "dcgm_diag":
        return ["dcgmi", "diag", "-r", "3"]
    argv = ["gpu_burn", "-d"]
    if burn.tensor_cores:
        argv.append("-tc")
    return [*argv, "-m", "%d%%" % burn.memory_percent, str(burn.seconds)]


def batch_job(burn: Burn, gpu_count: int, wrap: Optional[List[str]] = None,
              output: Optional[str] = None) -> BatchJob:
    """The burn job (``wrap``: another command, the lab's ``sleep`` of a neighbour job)."""
    return BatchJob(name=burn.job_name, node=burn.node, command=tuple(wrap if wrap is not None else burn_command(burn)),
                    minutes=burn.minutes, output=output or burn.output, gpus=gpu_count)


def sbatch_argv(burn: Burn, gpu_count: Any, wrap: Optional[List[str]] = None, output: Optional[str] = None,
                bin_dir: Optional[str] = None) -> List[str]:
    """The sbatch command line of the burn job, as the plan shows it (``gpu_count`` may be a placeholder);
    through slurmrestd the same job goes to its job/submit."""
    values = batch_job(burn, 1, wrap, output).sbatch_values()
    values["gres"] = "gpu:%s" % gpu_count
    return SlurmRunner(bin_dir=bin_dir).argv("sbatch", SBATCH_OPTIONS, **values)


def neighbour_wrap(burn: Burn) -> List[str]:
    return ["sleep", str(burn.seconds)]


def pod_manifest(burn: Burn, gpu_count: Any) -> Dict[str, Any]:
    """The burn Pod, pinned to the node, holding ``gpu_count`` GPUs for the burn's seconds."""
    labels = dict(MANAGED_BY)
    labels[FAULT_LABEL] = burn.fault_id
    labels[EXPERIMENT_LABEL] = EXPERIMENT.replace("_", "-")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": burn.pod_name, "namespace": burn.namespace, "labels": labels},
        "spec": {
            "nodeName": burn.node,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": burn.seconds + START_MARGIN_S,
            "terminationGracePeriodSeconds": POD_GRACE_S,
            "tolerations": [dict(toleration) for toleration in TOLERATIONS],
            "containers": [{
                "name": "burn",
                "image": burn.image,
                "command": burn_command(burn),
                "resources": {"limits": {GPU_RESOURCE: gpu_count}},
            }],
        },
    }


def journal_path(state_dir: str, fault_id: str) -> str:
    """The lab's saved values, beside the fake GPU state (the C library reads only its own files)."""
    return os.path.join(state_dir, ".chaos-burn-%s.json" % fault_id)


def lab_values(saved: Mapping[str, Any], memory_total: int, memory_percent: int) -> Dict[str, Any]:
    """What one burned GPU shows: LAB_BURN, memory_percent of its memory in use, power-cap slowdown."""
    values: Dict[str, Any] = dict(LAB_BURN)
    values["memory_used"] = memory_total * memory_percent // 100
    values["throttle_reasons"] = int(saved.get("throttle_reasons") or 0) | SW_POWER_CAP
    return values


# -- the family interface --------------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """What inject would do, exactly; pure (``spec["lab_dir"]``, when given, only names paths)."""
    burn = check_spec(spec)
    lab_dir = spec.get("lab_dir")
    count: Any = len(burn.gpus) if burn.gpus is not None else None
    actions: List[str] = []
    simulated: List[str] = []
    commands: List[List[str]] = []
    result: Dict[str, Any] = {"actions": actions, "simulated": simulated, "missing": [], "via": burn.via,
                              "params": burn.as_params(), "commands": commands}
    if burn.via == "slurm":
        gres = count if count is not None else "<every GPU of %s, from its Slurm Gres>" % burn.node
        argv = sbatch_argv(burn, gres)
        commands.append(argv)
        actions.append("%s: submit the burn as a Slurm job beside the protected job: %s"
                       % (burn.node, shlex.join(argv)))
        if burn.gpus is not None:
            actions.append("Slurm picks which %d GPU(s) of %s the job gets; the indices %s only give the count"
                           % (count, burn.node, list(burn.gpus)))
        actions.append("rollback: scancel <the job id> and any job still named %s (an ended job is fine)"
                       % burn.job_name)
    elif burn.via == "kubernetes":
        gpus = count if count is not None else "<allocatable %s of %s>" % (GPU_RESOURCE, burn.node)
        manifest = pod_manifest(burn, gpus)
        result["manifest"] = manifest
        actions.append("create Pod %s/%s on %s (spec.nodeName: the scheduler and a cordon are bypassed) with %s %s, "
                       "deadline %ds: %s" % (burn.namespace, burn.pod_name, burn.node, gpus, GPU_RESOURCE,
                                             burn.seconds + START_MARGIN_S, shlex.join(burn_command(burn))))
        actions.append("rollback: delete Pod %s/%s (already gone is fine)" % (burn.namespace, burn.pod_name))
    else:
        state_dir = os.path.join(lab_dir, "gpus", burn.node) if lab_dir else "<lab>/gpus/%s" % burn.node
        which = "every simulated GPU" if burn.gpus is None else "simulated GPU(s) %s" % ", ".join(map(str, burn.gpus))
        actions.append("%s: save utilization, temperature, power, memory use and throttle reasons of %s to %s"
                       % (burn.node, which, journal_path(state_dir, burn.fault_id)))
        actions.append("%s: set %s in %s: GPU utilization %d%%, memory utilization %d%%, %d C, %d W, memory used "
                       "%d%% of total, throttle reason SW power cap (0x%x) added"
                       % (burn.node, which, state_dir, LAB_BURN["utilization_gpu"], LAB_BURN["utilization_memory"],
                          LAB_BURN["temperature"], LAB_BURN["power_mw"] // 1000, burn.memory_percent, SW_POWER_CAP))
        simulated.append("the burn's load: no %s runs in the lab; its effect (utilization, temperature, power, memory "
                         "use, the power-cap slowdown) is written into the fake NVML state of %s"
                         % (shlex.join(burn_command(burn)), burn.node))
        simulated.append("clocks: the fake NVML has no clock field; the SW power-cap throttle reason (0x%x) stands for "
                         "the clocks coming down" % SW_POWER_CAP)
        simulated.append("the burn's result: no 'GPU i: OK|FAULTY' lines exist in the lab")
        if burn.neighbour_job:
            gres = count if count is not None else "<every simulated GPU of %s>" % burn.node
            argv = sbatch_argv(burn, gres, wrap=neighbour_wrap(burn), output="/dev/null")
            commands.append(argv)
            actions.append("%s: submit a real neighbour job holding the GPUs in Slurm: %s"
                           % (burn.node, shlex.join(argv)))
            simulated.append("the neighbour job holds GPUs in Slurm's books only; it sleeps, the load is simulated")
        actions.append("rollback: restore the saved values exactly%s" % (
            ", scancel the neighbour job" if burn.neighbour_job else ""))
    if burn.tool == "dcgm_diag":
        actions.append("dcgmi diag tests the GPUs of its group (by default every GPU DCGM sees on the node), not only "
                       "the job's; level 3 normally lasts about 15 minutes, so a shorter seconds ends it early")
    return result


def pending_undo(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """What revert needs if inject never returns (a crash): the names inject is about to use."""
    burn = check_spec(spec, lab=bool(ctx.lab_dir), namespace=ctx.namespace)
    undo: Dict[str, Any] = {"via": burn.via, "node": burn.node, "fault_id": burn.fault_id}
    if burn.via == "slurm":
        undo.update(job_id=None, job_name=burn.job_name)
    elif burn.via == "kubernetes":
        undo.update(namespace=burn.namespace, pod=burn.pod_name)
    else:
        state_dir = os.path.join(str(ctx.lab_dir or ""), "gpus", burn.node)
        undo.update(state_dir=state_dir, journal=journal_path(state_dir, burn.fault_id))
        if burn.neighbour_job:
            undo["neighbour"] = {"via": "slurm", "job_id": None, "job_name": burn.job_name}
    return undo


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Start the burn; returns the undo for the ledger. Every check runs before any change."""
    lab_dir = ctx.lab_dir
    burn = check_spec(spec, lab=bool(lab_dir), namespace=ctx.namespace)
    if burn.via == "lab":
        if not lab_dir:
            raise FieldError("params.via", "lab writes the lab's fake GPU state; a real site has real GPUs: use via "
                             "slurm or kubernetes")
        return _inject_lab(burn, str(lab_dir), ctx)
    if burn.via == "slurm":
        return _inject_slurm(burn, ctx)
    return _inject_kubernetes(burn, ctx)


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Stop the burn and undo its effect; idempotent.

    ``undo`` is what inject returned, merged with the spec; after a crash mid-inject it may be the
    spec alone, and the names derived from the fault id find what was started.
    """
    undo = _complete_undo(undo, ctx)
    via = undo.get("via")
    if via == "slurm":
        return _revert_slurm(undo, ctx)
    if via == "kubernetes":
        return _revert_kubernetes(undo, ctx)
    if via == "lab":
        return _revert_lab(undo, ctx)
    raise FieldError("via", "the burn's undo names no way it ran (slurm, kubernetes, lab): %r" % (via,))


def _complete_undo(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    merged = dict(undo)
    if merged.get("via") in VIAS and ("job_name" in merged or "pod" in merged or "state_dir" in merged):
        return merged
    # Only the spec: inject crashed before it returned.
    pending = pending_undo(merged, ctx)
    pending.update({k: v for k, v in merged.items() if k in ("job_id", "gpus", "neighbour")})
    return pending


# -- via slurm ------------------------------------------------------------------------------------
def _slurm_gpu_count(client: AnySlurmClient, node: str) -> int:
    found = client.nodes([node], with_jobs=False)[node]
    if not found.gpus:
        raise GpufleetError("Slurm lists no gpu GRES on %s (Gres=%r): params.gpus 'all' has nothing to burn"
                            % (node, found.gres))
    return int(found.gpus)


def _submit(client: AnySlurmClient, burn: Burn, gpu_count: int, wrap: Optional[List[str]] = None,
            output: Optional[str] = None) -> Dict[str, Any]:
    job = batch_job(burn, gpu_count, wrap, output)
    job_id, result = client.submit(job)
    return {"via": "slurm", "job_id": job_id, "job_name": burn.job_name, "output": job.output,
            "command": list(result.argv), "ran": result.ran}


def _inject_slurm(burn: Burn, ctx: FaultContext) -> Dict[str, Any]:
    client = context_slurm(ctx)
    count = len(burn.gpus) if burn.gpus is not None else _slurm_gpu_count(client, burn.node)
    undo = _submit(client, burn, count)
    undo.update(node=burn.node, fault_id=burn.fault_id, tool=burn.tool, gpu_count=count)
    return undo


def _revert_slurm(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    client = context_slurm(ctx)
    job_id = undo.get("job_id")
    ids = check_job_ids([job_id], field="job_id") if job_id else []
    job_name = undo.get("job_name")
    if job_name:
        # A job whose id never reached the ledger (a crash right after sbatch, or a rerun that
        # submitted twice) is found by its name, which carries the fault id.
        ids += [job.job_id for job in client.jobs() if job.name == job_name and job.job_id not in ids]
    reverted: List[str] = []
    for one in ids:
        result = client.cancel_unless_gone(one)
        if result is None:
            continue  # it ended on its own: nothing to stop
        verb = "cancelled" if result.ran else "would cancel"
        reverted.append("%s Slurm job %s (%s)" % (verb, one, shlex.join(result.argv)))
    done: Dict[str, Any] = {"reverted": reverted, "already": not reverted}
    # The burn's own verdict (never a neighbour's sleep, which has no tool): gpu-burn exits 0
    # whatever it found, so only its output tells.
    if undo.get("tool") and undo.get("output") and not ctx.check_mode:
        done["observed"] = {"burn": _output_verdict(str(undo["output"]), str(undo["tool"]))}
    return done


# At most this much of the end of a burn's output is read: the verdict lines come last.
OUTPUT_TAIL_BYTES = 1024 * 1024
OUTPUT_TAIL_LINES = 5000


def _output_verdict(path: str, tool: str) -> Dict[str, Any]:
    """The burn's output file parsed (burn_output.summary), or why it could not be read here."""
    try:
        text = read_tail(path, OUTPUT_TAIL_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        return {"tool": tool, "verdict": "unknown",
                "why": "the output %s cannot be read on this host (%s): read it on the node" % (path, exc.strerror)}
    return burn_output.summary(burn_output.parse_output(text, tool))


# -- via kubernetes -------------------------------------------------------------------------------
def _core_v1(ctx: FaultContext) -> Any:
    if ctx.core_v1 is not None:
        return ctx.core_v1
    kubeconfig = ctx.kubeconfig
    if not kubeconfig and ctx.lab_dir:
        kubeconfig = os.path.join(str(ctx.lab_dir), "kube", "admin.kubeconfig")
    return core_v1(kubeconfig, ctx.context, ctx.kube_timeout)


def _dry_run(ctx: FaultContext) -> Dict[str, Any]:
    # Check mode asks the API server to validate without persisting (server-side dry run).
    return {"dry_run": "All"} if ctx.check_mode else {}


def _allocatable_gpus(api: Any, node: str) -> int:
    what = "read node %s" % node
    try:
        found = api.read_node(node)
    except ApiException as exc:
        raise api_failure(exc, what) from exc
    except TransportError as exc:
        raise unreachable(exc, what) from exc
    status = found.get("status") if isinstance(found, dict) else getattr(found, "status", None)
    allocatable = (status.get("allocatable") if isinstance(status, dict) else getattr(status, "allocatable", None))
    value = (allocatable or {}).get(GPU_RESOURCE)
    if value is None or not str(value).isdigit() or int(value) < 1:
        raise GpufleetError("node %s has no allocatable %s (%r): params.gpus 'all' has nothing to burn"
                            % (node, GPU_RESOURCE, value))
    return int(value)


def _inject_kubernetes(burn: Burn, ctx: FaultContext) -> Dict[str, Any]:
    api = _core_v1(ctx)
    count = len(burn.gpus) if burn.gpus is not None else _allocatable_gpus(api, burn.node)
    body = pod_manifest(burn, count)
    what = "create Pod %s/%s" % (burn.namespace, burn.pod_name)
    existed = False
    try:
        api.create_namespaced_pod(burn.namespace, body, **_dry_run(ctx))
    except ApiException as exc:
        if getattr(exc, "status", None) != 409:
            raise api_failure(exc, what) from exc
        existed = True  # a rerun after a crash: the burn is running already
    except TransportError as exc:
        raise unreachable(exc, what) from exc
    return {"via": "kubernetes", "node": burn.node, "fault_id": burn.fault_id, "namespace": burn.namespace,
            "pod": burn.pod_name, "gpu_count": count, "tool": burn.tool, "existed": existed,
            "check_mode": bool(ctx.check_mode)}


def _revert_kubernetes(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    api = _core_v1(ctx)
    namespace, name = str(undo["namespace"]), str(undo["pod"])
    # Its log before it goes: the burn's verdict (the Pod's exit code says nothing either).
    tool = str(undo.get("tool") or "gpu_burn")
    observed = None if ctx.check_mode else {"burn": _log_verdict(api, namespace, name, tool)}
    what = "delete Pod %s/%s" % (namespace, name)
    try:
        api.delete_namespaced_pod(name, namespace, grace_period_seconds=POD_GRACE_S, **_dry_run(ctx))
    except ApiException as exc:
        if getattr(exc, "status", None) == 404:
            return {"reverted": [], "already": True}
        raise api_failure(exc, what) from exc
    except TransportError as exc:
        raise unreachable(exc, what) from exc
    verb = "would delete" if ctx.check_mode else "deleted"
    done: Dict[str, Any] = {"reverted": ["%s Pod %s/%s" % (verb, namespace, name)], "already": False}
    if observed:
        done["observed"] = observed
    return done


def _log_verdict(api: Any, namespace: str, name: str, tool: str) -> Dict[str, Any]:
    """The burn Pod's log parsed (burn_output.summary), or why it could not be read."""
    try:
        text = api.read_namespaced_pod_log(name, namespace, tail_lines=OUTPUT_TAIL_LINES)
    except (ApiException, TransportError) as exc:
        return {"tool": tool, "verdict": "unknown", "why": "the log of Pod %s/%s cannot be read: %s"
                % (namespace, name, getattr(exc, "reason", None) or exc)}
    return burn_output.summary(burn_output.parse_output(text if isinstance(text, str) else str(text or ""), tool))


# -- via lab --------------------------------------------------------------------------------------
def _lab_state_dir(lab_dir: str, node: str) -> str:
    path = os.path.join(lab_dir, "gpus", node)
    if not os.path.isfile(os.path.join(path, "node.state")):
        raise FieldError("target", "%s has no simulated GPUs in %s" % (node, path))
    return path


def _read_journal(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise GpufleetError("the burn's journal %s is not JSON (%s): restore the GPUs by hand or clear them"
                            % (path, exc)) from exc


def _write_journal(path: str, undo: Mapping[str, Any]) -> None:
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(undo, handle, sort_keys=True)
    os.replace(tmp, path)


def _inject_lab(burn: Burn, lab_dir: str, ctx: FaultContext) -> Dict[str, Any]:
    state_dir = _lab_state_dir(lab_dir, burn.node)
    state = fake_gpu_state.read(state_dir)
    count = int(state["node"]["count"])
    indices = list(burn.gpus) if burn.gpus is not None else list(range(count))
    missing = [gpu for gpu in indices if gpu >= count]
    if missing:
        raise FieldError("params.gpus", "GPU(s) %s do not exist on %s, which has %d" % (missing, burn.node, count))
    journal = journal_path(state_dir, burn.fault_id)
    earlier = _read_journal(journal)
    if earlier and earlier.get("gpus"):
        # A rerun after a crash: the values from before the first inject are the ones to keep;
        # the GPUs may already show the burn.
        saved = earlier["gpus"]
    else:
        saved = [{"gpu": gpu, "saved": {name: state["gpus"][gpu][name] for name in SAVED_FIELDS}} for gpu in indices]
    undo: Dict[str, Any] = {"via": "lab", "node": burn.node, "fault_id": burn.fault_id, "state_dir": state_dir,
                            "journal": journal, "gpus": saved, "neighbour": (earlier or {}).get("neighbour"),
                            "tool": burn.tool}
    if ctx.check_mode:
        return dict(undo, check_mode=True)
    if burn.neighbour_job and not undo["neighbour"]:
        # Written before sbatch, so revert looks for the job by name even if the id never comes back.
        undo["neighbour"] = {"via": "slurm", "job_id": None, "job_name": burn.job_name}
    _write_journal(journal, undo)
    try:
        for entry in saved:
            gpu = int(entry["gpu"])
            fake_gpu_state.set_fields(state_dir, gpu, **lab_values(entry["saved"], state["gpus"][gpu]["memory_total"],
                                                                   burn.memory_percent))
        if burn.neighbour_job and not undo["neighbour"].get("job_id"):
            undo["neighbour"] = _submit(context_slurm(ctx), burn, len(saved), wrap=neighbour_wrap(burn),
                                        output="/dev/null")
            _write_journal(journal, undo)
    except Exception:
        # Leave nothing half-done behind the error; the error itself is what the caller sees.
        # If that fails too, the journal stays and chaos-stop's revert retries from it.
        with contextlib.suppress(Exception):
            _revert_lab(undo, ctx)
        raise
    return undo


def _revert_lab(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    check_mode = bool(ctx.check_mode)
    state_dir = str(undo["state_dir"])
    journal = str(undo.get("journal") or journal_path(state_dir, str(undo.get("fault_id"))))
    recorded = _read_journal(journal)
    gpus = undo.get("gpus") or (recorded or {}).get("gpus") or []
    neighbour = undo.get("neighbour") or (recorded or {}).get("neighbour")
    reverted: List[str] = []
    node_state = os.path.join(state_dir, "node.state")
    if gpus and os.path.isfile(node_state):
        count = int(fake_gpu_state.read(state_dir)["node"]["count"])
        for entry in gpus:
            gpu, saved = int(entry["gpu"]), dict(entry["saved"])
            if gpu >= count:
                continue  # the node was re-initialised with fewer GPUs: nothing of ours is left there
            text = ", ".join("%s=%s" % item for item in sorted(saved.items()))
            if check_mode:
                reverted.append("would restore simulated GPU %d of %s: %s" % (gpu, undo.get("node"), text))
            elif fake_gpu_state.set_fields(state_dir, gpu, **saved):
                # Unconditional: a drill owns the GPU while it runs, so the values before it are the truth.
                reverted.append("restored simulated GPU %d of %s: %s" % (gpu, undo.get("node"), text))
    if neighbour:
        # After the GPUs: a Slurm that does not answer must not keep them burning. The journal
        # stays until this succeeds too, so a retry still finds the job.
        reverted += _revert_slurm(neighbour, ctx)["reverted"]
    if recorded is not None and not check_mode:
        os.unlink(journal)
    return {"reverted": reverted, "already": not reverted}
