# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The experiments a drill can run, and what the feedback loop is expected to show for each.

Pure: a table and its lookups. Each experiment names its family (the file under ``chaos/`` that
injects it), the backends it uses by default in the lab and on a real site, and the loop's
expectations: the PromQL that shows detection, the alerts that should fire, whether the
scheduler must fence the node and whether the protected job must be requeued and resume.
An expectation of "no alert" is not a pass: it is how a drill finds an observability gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import check_plain
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_name,
    check_number,
    check_path_under,
)

LOOP_STEPS = ("detected", "alerted", "scheduler", "recovered")
DEFAULT_DEADLINES = {"detected": 30.0, "alerted": 90.0, "scheduler": 180.0, "recovered": 300.0}

# nvmlClocksEventReason* bits (nvml.h).
SW_POWER_CAP = 0x4
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80


@dataclass(frozen=True)
class Detection:
    """``query`` is PromQL with {node}; detected when its value rises above the baseline
    (``mode='rise'``) or reaches ``threshold`` (``mode='at_least'``). With ``mode='job_event'``
    the protected job itself reports it: ``query`` is the train_sim event to find in its output."""

    query: str
    mode: str = "rise"
    threshold: float = 1.0
    what: str = ""


@dataclass(frozen=True)
class Experiment:
    name: str
    family: str
    summary: str
    lab_backends: Tuple[str, ...]
    site_backends: Tuple[str, ...]
    detection: Optional[Detection]
    alerts: Tuple[str, ...] = ()
    fences: bool = False  # a fatal fault: Slurm DRAIN/DOWN and a cordon are expected
    requeues: bool = False  # the protected job must be requeued and resume from its checkpoint
    missing_alert_hint: str = ""
    simulated: Tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)  # defaults; gpu_xid's loop depends on params
    # The knobs it takes (its schema): any other key of params is refused by name, so a typo
    # ("xidd: 79") fails instead of running the default fault.
    knobs: Tuple[str, ...] = ()
    # On a real site the fault changes the target node's own host (a file such as nccl.conf or a
    # TaskProlog drop-in, /dev/kmsg, dcgmi, tc/nftables, a mount, a process): it must run there,
    # never on the controller, which did not opt in. False: it acts only through an API (Kubernetes,
    # Slurm) and may run anywhere. See acts_on_host() for the knobs that move a fault onto the host.
    on_host: bool = False
    # Why nothing in the loop recovers from this fault yet (the drill then reports "recovered" as not
    # observable, with this reason, instead of waiting for its deadline); empty: recovery is awaited.
    no_recovery: str = ""
    # A drill of the remediation's own circuit breaker (a storm): the trip is what the scheduler step
    # checks (observe.LoopWatch.look_breaker), not a reason to abort; it needs two targets or more.
    breaker: bool = False
    # A drill of the remediation's escalation: the same fatal fault again on a node that a remediation
    # already cured of it. The hold is what the scheduler step checks (observe.LoopWatch.look_escalation).
    escalation: bool = False


def _gpu(name: str, summary: str, detection: Detection, alerts: Tuple[str, ...], fences: bool,
         hint: str = "", **params: Any) -> Experiment:
    backends = ("nvml_sim", "kmsg") if params.pop("with_kmsg", True) else ("nvml_sim",)
    knobs = ("gpu", "pci_bus", *sorted(params))
    return Experiment(
        name=name,
        family="gpu_fault",
        summary=summary,
        lab_backends=backends,
        site_backends=tuple(b for b in ("kmsg", "dcgm") if b != "kmsg" or "kmsg" in backends),
        detection=detection,
        alerts=alerts,
        fences=fences,
        requeues=fences,
        missing_alert_hint=hint,
        simulated=("the GPU: the fault is written into the lab's fake NVML state (and the node's own kernel-log "
                   "file), which the unmodified health agent reads through pynvml",),
        params=dict(params, gpu=0),
        knobs=knobs,
        on_host=True,  # kmsg writes /dev/kmsg, dcgm runs dcgmi: both where the module runs
    )


EXPERIMENTS: Dict[str, Experiment] = {}


def _add(experiment: Experiment) -> None:
    EXPERIMENTS[experiment.name] = experiment


XID_COUNTER = Detection('sum(gpufleet_gpu_xid_errors_total{{node="{node}",xid="{xid}"}})', what="XID counter")


def _rail_drill(name: str, summary: str, xid: int, no_recovery: str, **rail: bool) -> Experiment:
    """A fatal XID that drills one of the remediation's own safety rails (``breaker`` or
    ``escalation``): that rail's decision is the scheduler step, and nothing recovers by itself."""
    return replace(_gpu(name, summary, XID_COUNTER, ("GpuNodeFatal",), True, xid=xid), requeues=False,
                   no_recovery=no_recovery, **rail)


_add(_gpu("gpu_xid", "An XID error on one GPU (params.xid, default 79)", XID_COUNTER, ("GpuNodeFatal",), True, xid=79))
# A fatal XID (79 by default) on every target at once, more targets than the breaker lets through:
# the storm drill of the remediation's own safety rail. Its targets must be more than the breaker's
# cap for the pool (25 %, at least one node, by default), and the drill's own blast radius must allow
# them explicitly.
_add(_rail_drill(
    "breaker_storm", "A fatal XID (params.xid, default 79) on every target at once: the remediation's circuit "
                     "breaker must trip at its cap, quarantine the nodes under it and only fence the others in Slurm",
    79, "a storm drill checks the breaker: the refused nodes wait, fenced in Slurm, for "
        "playbooks/remediation-reset.yml, which an operator runs", breaker=True))
# The same fatal XID again on a node that a remediation cured of it (a GPU reset for XID 48, the
# default): escalation must hold the node for a human instead of resetting it a second time. The first
# cure is a drill of its own (gpu_xid with the same xid and gpu), run just before, or a real one.
_add(_rail_drill(
    "gpu_xid_repeat", "The same fatal XID (params.xid, default 48) again on a node that a remediation cured of it: "
                      "escalation must hold the node for a human (plan HOLD: fenced and quarantined, no second reset)",
    48, "a held node waits for a human: playbooks/return-node.yml returns it once its hardware is checked",
    escalation=True))
_add(_gpu("gpu_ecc_dbe", "Uncorrectable (double-bit) ECC errors, with XID 48",
          Detection('sum(gpufleet_gpu_ecc_errors_total{{node="{node}",type="uncorrectable",counter="volatile"}})',
                    what="volatile uncorrectable ECC counter"),
          ("GpuEccUncorrectableErrors", "GpuNodeFatal"), True, count=1))
_add(_gpu("gpu_ecc_sbe_storm", "A storm of correctable (single-bit) ECC errors, with XID 92",
          Detection('sum(gpufleet_gpu_ecc_errors_total{{node="{node}",type="correctable",counter="volatile"}})',
                    what="volatile correctable ECC counter"),
          (), False,
          hint='an alert rule on increase(gpufleet_gpu_ecc_errors_total{type="correctable",counter="volatile"}[10m]) '
               "above the rate your GPUs normally show: a single-bit storm precedes page retirement",
          count=10000))
_add(_gpu("gpu_retired_pages", "Retired pages pending a GPU reset, with XID 63",
          Detection('max(gpufleet_gpu_retired_pages_pending{{node="{node}"}})', "at_least", 1,
                    what="retired pages pending"),
          (), False,
          hint="an alert rule on gpufleet_gpu_retired_pages_pending == 1 for 10m (the GPU needs a reset to retire "
               "them; GpuRowRemapPending covers only row remapping)"))
_add(_gpu("gpu_row_remap_failure", "A failed row remapping (no spare rows), with XID 64",
          Detection('max(gpufleet_gpu_remapped_rows{{node="{node}",kind="failed"}})', "at_least", 1,
                    what="row remap failure flag"),
          ("GpuRowRemapFailure",), True))
_add(_gpu("gpu_thermal", "Overheating: core temperature up, thermal slowdown",
          Detection('max(gpufleet_gpu_throttle_reasons{{node="{node}",reason=~"sw_thermal_slowdown|hw_thermal_slowdown"}})',
                    "at_least", 1, what="thermal throttle reason"),
          ("GpuThermalSlowdown",), False, with_kmsg=False, temperature_c=95))
_add(_gpu("gpu_power", "Power excursion: power-cap and power-brake slowdown",
          Detection('max(gpufleet_gpu_throttle_reasons{{node="{node}",reason=~"sw_power_cap|hw_power_brake_slowdown"}})',
                    "at_least", 1, what="power throttle reason"),
          (), False,
          hint='an alert rule on gpufleet_gpu_throttle_reasons{reason=~"sw_power_cap|hw_power_brake_slowdown"} == 1 '
               "for 5m (a power brake slows every job on the node)",
          with_kmsg=False, power_w=750))
_add(_gpu("gpu_nvlink", "NVLink errors (CRC, replay) on one link, with XID 74",
          Detection('sum(gpufleet_gpu_nvlink_errors_total{{node="{node}"}})', what="NVLink error counters"),
          ("GpuNvlinkErrorsRising",), False, count=1000, link_down=False))
_add(_gpu("gpu_fallen_off_bus", "The GPU falls off the bus (NVML: GPU is lost), with XID 79",
          Detection('max(gpufleet_gpu_lost{{node="{node}"}})', "at_least", 1, what="GPU lost gauge"),
          ("GpuNodeFatal",), True))
_add(Experiment(
    name="gpu_burn", family="burn", summary="GPU burn / noisy neighbour beside the protected job",
    lab_backends=("lab",), site_backends=("slurm",),
    detection=Detection('max(gpufleet_gpu_throttle_reasons{{node="{node}",reason="sw_power_cap"}})', "at_least", 1,
                        what="power-cap slowdown of the burned GPUs"),
    missing_alert_hint='an alert rule on gpufleet_gpu_throttle_reasons{reason="sw_power_cap"} == 1 for 5m beside '
                       "high utilization: a noisy neighbour slows the protected job without any fault",
    simulated=("the burn's load: utilization, temperature, power and the power-cap slowdown are written into the "
               "fake GPU state (the fake NVML has no clock field)",),
    params={"seconds": 60},
    knobs=("seconds", "gpus", "via", "tool", "memory_percent", "tensor_cores", "neighbour_job", "namespace", "image",
           "output"),
))
_CHECKPOINT_HINT = ("a metric for failed checkpoint saves from the training job (or its launcher) and an alert on it: "
                    "a job that cannot save loses all work since its last good checkpoint at the next fault")
_add(Experiment(
    name="checkpoint_kill", family="checkpoint",
    summary="Kill the job while it writes a synchronous checkpoint; it must resume from the previous valid one",
    lab_backends=("slurm",), site_backends=("slurm",), detection=None, requeues=True,
    missing_alert_hint=_CHECKPOINT_HINT, params={"timeout_s": 120},
    knobs=("job_id", "output", "timeout_s", "poll_s", "requeue", "requeue_timeout_s"),
))
_add(Experiment(
    name="checkpoint_fill", family="checkpoint",
    summary="Fill the checkpoint volume; the job must keep its last good checkpoint and report the failed save",
    lab_backends=("fill",), site_backends=("fill",), missing_alert_hint=_CHECKPOINT_HINT,
    detection=Detection("checkpoint_failed", "job_event", what="the job reported a failed checkpoint save"),
    simulated=("the checkpoint volume is the lab's size-limited tmpfs",), params={"leave_bytes": 65536},
    knobs=("path", "leave_bytes", "allow_shared_filesystem"),
    on_host=True,
))
_add(Experiment(
    name="checkpoint_storage", family="checkpoint",
    summary="Cut (read-only remount) or slow (cgroup v2 io.max) the checkpoint storage path",
    lab_backends=("mount",), site_backends=("mount",), missing_alert_hint=_CHECKPOINT_HINT,
    detection=Detection("checkpoint_failed", "job_event", what="the job reported a failed checkpoint save"),
    simulated=("the storage path is the lab's tmpfs; io.max needs a block device, so 'slow' is a missing "
               "capability in the lab",),
    params={"mode": "cut"},
    knobs=("path", "mode", "rbps", "wbps", "cgroup", "job_id", "allow_shared_filesystem"),
    on_host=True,
))
_add(Experiment(
    name="nccl_env", family="nccl_env",
    summary="Set NCCL variables (params.vars) for the jobs started on the target; restored byte for byte",
    lab_backends=("slurm_taskprolog",), site_backends=("nccl_conf",), detection=None,
    missing_alert_hint="export each job's NCCL_* environment (and nccl.conf's settings) as a metric or a job label, "
                       "e.g. from the TaskProlog or the launcher, and the jobs' NCCL bus bandwidth: nothing shows "
                       "today that a node's jobs run with a changed NCCL configuration",
    simulated=("no NCCL and no nccl-tests in the lab: the variables reach the jobs' environment, nothing uses them",),
    params={"vars": {"NCCL_IB_DISABLE": "1"}},
    knobs=("vars", "path", "nccl_tests", "nccl_tests_args", "measure"),
    on_host=True,
))
_add(Experiment(
    name="net_degrade", family="network",
    summary="Delay, loss and a rate limit on the fabric/IPoIB interface (tc, nftables), observed with eBPF",
    lab_backends=("netns",), site_backends=("tc+nft",), detection=None,
    missing_alert_hint="interface counters on the node (node_exporter's node_network_transmit_drop_total and "
                       "throughput, the InfiniBand port counters for RDMA, which bypasses tc) and an alert on drops "
                       "or a throughput fall: today only the drill's own eBPF counts show a degraded fabric",
    simulated=("the fabric: two network namespaces joined by a veth pair, built by the drill; the degradation "
               "and the eBPF counts are real on that path",),
    params={"delay_ms": 50, "loss_percent": 5, "rate_mbit": 10},
    knobs=("interface", "delay_ms", "loss_percent", "rate_mbit", "observe", "measure_s"),
    on_host=True,
))
_IB_SIMULATED = ("the HCA: the port's states and counters are files in the lab node's fake sysfs, which the "
                 "unmodified health agent reads as it reads /sys",)
_add(Experiment(
    name="ib_port_down", family="ib_fault",
    summary="An InfiniBand port goes DOWN/Disabled (params.hca, params.port)",
    lab_backends=("ib_sim",), site_backends=("ibportstate",),
    detection=Detection('max(1 - gpufleet_ib_port_up{{node="{node}",hca="{hca}",port="{port}"}})', "at_least", 1,
                        what="the port's up gauge"),
    alerts=("GpuNodeInfiniBandDown",),
    simulated=_IB_SIMULATED, params={"hca": "mlx5_0", "port": 1}, knobs=("hca", "port"), on_host=True,
))
_add(Experiment(
    name="ib_link_flap", family="ib_fault",
    summary="An InfiniBand link flaps: down and up params.times times (default 3, the agent's flap count)",
    lab_backends=("ib_sim",), site_backends=("ibportstate",),
    detection=Detection('sum(gpufleet_ib_port_link_downed_total{{node="{node}",hca="{hca}",port="{port}"}})',
                        what="the port's link_downed counter"),
    alerts=("GpuNodeInfiniBandDown",),
    simulated=_IB_SIMULATED, params={"hca": "mlx5_0", "port": 1, "times": 3}, knobs=("hca", "port", "times"),
    on_host=True,
))
_add(Experiment(
    name="job_hang", family="job_hang",
    summary="A rank of the protected job stops (SIGSTOP to its batch step): RUNNING, GPUs held, no progress",
    lab_backends=("slurm",), site_backends=("slurm",),
    detection=Detection('max(gpufleet_job_stalled{{node="{node}",job_id="{job_id}"}})', "at_least", 1,
                        what="the job's stalled gauge (its progress file unchanged for its window)"),
    alerts=("GpuJobStalled",),
    # The remediation's JOB_HANG plan requeues the job; it resumes from its last checkpoint, on any node.
    requeues=True,
    missing_alert_hint="the job's progress file (GPUFLEET_PROGRESS_FILE from the TaskProlog, docs/agent.md) and "
                       "the GpuJobStalled rule: without them a hung job holds its GPUs unseen",
    knobs=("job_id",),
))
_NUMA_HINT = ("per-node CPU and memory pressure and NUMA counters (node_exporter's node_pressure_cpu_waiting_"
              "seconds_total and node_pressure_memory_*, node_memory_numa_numa_miss_total / numa_foreign with "
              "--collector.meminfo_numa) and an alert on them beside the protected job's step rate: nothing "
              "today shows a noisy neighbour or remote memory slowing a job")
_NUMA_KNOBS = ("seconds", "workers", "load_percent", "memory_percent", "near_node", "far_node", "via", "output",
               "topology_manager_policy", "topology_manager_scope", "allow_kubelet_change", "kubelet_config",
               "kubelet_restart")
_NUMA_LOAD = ("the target node: the lab's Slurm nodes are slurmd daemons on one machine, so the load (real "
              "stress-ng, a real Slurm job) runs on that machine beside every lab node's jobs")
_add(Experiment(
    name="numa_remote_memory", family="numa",
    summary="A job's memory on the far NUMA node (numactl --membind), its CPUs on the near one (stress-ng --vm)",
    lab_backends=("slurm",), site_backends=("slurm",), detection=None, missing_alert_hint=_NUMA_HINT,
    simulated=(_NUMA_LOAD + "; the lab machine has one NUMA node, so no memory is remote",),
    params={"seconds": 60, "workers": 1, "memory_percent": 10},
    knobs=_NUMA_KNOBS,
))
_add(Experiment(
    name="numa_memory_pressure", family="numa",
    summary="Memory pressure on one NUMA node (stress-ng --vm bound there with numactl)",
    lab_backends=("slurm",), site_backends=("slurm",), detection=None, missing_alert_hint=_NUMA_HINT,
    simulated=(_NUMA_LOAD + "; one NUMA node: the pressure is on the whole machine",),
    params={"seconds": 60, "workers": 1, "memory_percent": 50},
    knobs=_NUMA_KNOBS,
))
_add(Experiment(
    name="cpu_saturation", family="numa",
    summary="CPU saturation beside the protected job (stress-ng --cpu N --cpu-load P)",
    lab_backends=("slurm",), site_backends=("slurm",), detection=None, missing_alert_hint=_NUMA_HINT,
    simulated=(_NUMA_LOAD,),
    params={"seconds": 60, "workers": 1, "load_percent": 100},
    knobs=_NUMA_KNOBS,
))


def get(name: Any) -> Experiment:
    if name not in EXPERIMENTS:
        raise FieldError("experiment", "unknown experiment %r; known: %s" % (name, ", ".join(sorted(EXPERIMENTS))))
    return EXPERIMENTS[name]


# Knobs that name a file or a program on the node: only from the directories the site declares
# (chaos_drill_allowed_dirs), never any absolute path (nccl_tests ran any executable).
PATH_KNOBS = ("path", "output", "nccl_tests", "kubelet_config")
_PCI_BUS = r"([0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"


def check_params(experiment: Experiment, given: Any, allowed_dirs: Sequence[str] = ()) -> Dict[str, Any]:
    """The drill's own ``params`` against the experiment's schema, before anything is planned.

    Unknown keys are refused by name; strings carry no control characters, numbers are finite;
    a path or an executable lies under one of ``allowed_dirs``. The families check each knob's
    value and range themselves when they plan."""
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise FieldError("params", "must be a mapping, got %s" % type(given).__name__)
    for key in given:
        if key not in experiment.knobs:
            raise FieldError("params.%s" % key, "unknown parameter of %s; parameters: %s"
                             % (experiment.name, ", ".join(experiment.knobs) or "none"))
    check_plain(dict(given), "params")
    for key in PATH_KNOBS:
        if given.get(key) is not None:
            check_path_under(given[key], "params." + key, allowed_dirs)
    if given.get("pci_bus") is not None:
        check_name(given["pci_bus"], "params.pci_bus", _PCI_BUS, "a PCI bus id such as 0000:3b:00.0")
    return dict(given)


def loop_expectations(experiment: Experiment, params: Mapping[str, Any]) -> Dict[str, Any]:
    """What each loop step should show for this run (gpu_xid depends on the XID's catalog entry)."""
    alerts, fences = list(experiment.alerts), experiment.fences
    if experiment.name == "gpu_xid":
        fatal = params.get("xid_severity") == "fatal"
        alerts, fences = (["GpuNodeFatal"], True) if fatal else (["GpuNodeDegraded"], False)
    return {
        "detection": None if experiment.detection is None else {
            "query": experiment.detection.query, "mode": experiment.detection.mode,
            "threshold": experiment.detection.threshold, "what": experiment.detection.what,
        },
        "alerts": alerts,
        "fences": fences,
        "requeues": fences or experiment.requeues,
        "no_recovery": experiment.no_recovery,
        "missing_alert_hint": experiment.missing_alert_hint,
        "breaker": experiment.breaker,
        "escalation": experiment.escalation,
    }


def deadlines(overrides: Optional[Mapping[str, Any]]) -> Dict[str, float]:
    merged = dict(DEFAULT_DEADLINES)
    for key, value in (overrides or {}).items():
        if key not in merged:
            raise FieldError("deadlines.%s" % key, "unknown loop step; steps: %s" % ", ".join(LOOP_STEPS))
        merged[key] = check_number(value, "deadlines.%s" % key, above=0)
    return merged


def acts_on_host(experiment: Experiment, params: Mapping[str, Any]) -> bool:
    """Whether this run of ``experiment`` changes the target's own host (Experiment.on_host). A NUMA
    load sent through Slurm acts through its API; started as a process (``via: process``) or with a
    kubelet change (``topology_manager_policy``) it acts on the host."""
    if experiment.on_host:
        return True
    if experiment.family == "numa":
        return params.get("via") == "process" or bool(params.get("topology_manager_policy"))
    return False


def names() -> List[str]:
    return sorted(EXPERIMENTS)
