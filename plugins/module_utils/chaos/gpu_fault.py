# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""GPU fault injection: XID, ECC, retired pages, row remapping, thermal, power, NVLink, lost GPU.

Three backends, combined per fault (experiments.py gives the default combination):

* ``nvml_sim`` - the lab's fake NVML state (lab/fake_gpu_state.py): counters, flags, a queued XID
  event. The undo keeps the previous value of every field it changed, so revert is exact.
* ``kmsg`` - a driver-format ``NVRM: Xid`` line in the node's kernel log: ``/dev/kmsg`` on a real
  node, the agent's own kernel-log file in the lab (never the lab machine's kernel log, which
  every lab node shares). A kernel log cannot be unwritten; revert tells the lab's agent to
  forget its XID history, as a GPU reset does.
* ``dcgm`` - ``dcgmi test --inject`` with numeric field ids (a field name silently becomes 0).
  Injected values live only in DCGM's cache and expire, so the drill re-injects them while it
  runs (``reinject_commands``); revert injects the healthy value.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import int_param
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_lookup import xid_info
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.gpu_reset import forget_xids

BACKENDS = ("nvml_sim", "kmsg", "dcgm")
DEV_KMSG = "/dev/kmsg"

# DCGM field ids (dcgm_fields.h).
DCGM_XID_ERRORS = 230
DCGM_ECC_SBE_VOL_TOTAL = 310
DCGM_ECC_DBE_VOL_TOTAL = 311
DCGM_RETIRED_PENDING = 392
DCGM_ROW_REMAP_FAILURE = 395
DCGM_THERMAL_VIOLATION = 241
DCGM_POWER_VIOLATION = 240
DCGM_GPU_TEMP = 150
DCGM_NVLINK_CRC_FLIT = 409


class Fault:
    """One GPU fault resolved from an experiment and its params: what each backend does."""

    def __init__(self, experiment: str, params: Mapping[str, Any]) -> None:
        self.experiment = experiment
        self.params = dict(experiments.get(experiment).params)
        self.params.update(params or {})
        self.gpu = int_param(self.params, "gpu", 0, 31)
        self.xid: Optional[int] = None
        self.fields: Dict[str, Any] = {}  # absolute values, or ("add", n) / ("or", bits) on the current one
        self.kernel_lines: List[str] = []  # with {bus}
        self.dcgm: List[Tuple[int, int]] = []  # (field id, value)
        self.dcgm_healthy: List[Tuple[int, int]] = []
        getattr(self, "_" + experiment)()

    # -- the faults ------------------------------------------------------------------------------
    def _gpu_xid(self) -> None:
        self.xid = int_param(self.params, "xid", 1, 2**31)
        info = xid_info(self.xid)
        self.params["xid_severity"] = info["severity"]
        self._xid_line(self.xid, info["description"] or info["name"])
        self.dcgm, self.dcgm_healthy = [(DCGM_XID_ERRORS, self.xid)], [(DCGM_XID_ERRORS, 0)]

    def _breaker_storm(self) -> None:
        # A fatal XID (79 by default) on every target: only a fatal one makes the remediation act.
        self._fatal_xid()

    def _gpu_xid_repeat(self) -> None:
        # The same fatal XID (48 by default) as the cure before it: escalation compares the fault's reason.
        self._fatal_xid()

    def _fatal_xid(self) -> None:
        self._gpu_xid()
        if self.params["xid_severity"] != "fatal":
            raise FieldError("params.xid", "%s needs an XID the catalog calls fatal (79, 48, ...), not %d (%s): the "
                                           "remediation acts on fatal faults only"
                             % (self.experiment, self.xid, self.params["xid_severity"]))

    def _gpu_ecc_dbe(self) -> None:
        count = int_param(self.params, "count", 1, 10**9)
        self.xid = 48
        self.fields = {"ecc_dbe_volatile": ("add", count), "ecc_dbe_aggregate": ("add", count)}
        self._xid_line(48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
                           "at partition 0, subpartition 0.")
        self.dcgm, self.dcgm_healthy = [(DCGM_ECC_DBE_VOL_TOTAL, count)], [(DCGM_ECC_DBE_VOL_TOTAL, 0)]

    def _gpu_ecc_sbe_storm(self) -> None:
        count = int_param(self.params, "count", 1, 10**12)
        self.fields = {"ecc_sbe_volatile": ("add", count), "ecc_sbe_aggregate": ("add", count)}
        self._xid_line(92, "High single-bit ECC error rate")
        self.dcgm, self.dcgm_healthy = [(DCGM_ECC_SBE_VOL_TOTAL, count)], [(DCGM_ECC_SBE_VOL_TOTAL, 0)]

    def _gpu_retired_pages(self) -> None:
        self.fields = {"retired_pages_pending": True}
        self._xid_line(63, "ECC page retirement or row remapping recording event")
        self.dcgm, self.dcgm_healthy = [(DCGM_RETIRED_PENDING, 1)], [(DCGM_RETIRED_PENDING, 0)]

    def _gpu_row_remap_failure(self) -> None:
        self.fields = {"remapped_rows_failure": True, "remapped_rows_uncorrected": ("add", 1)}
        self._xid_line(64, "ECC page retirement or row remapper recording failure")
        self.dcgm, self.dcgm_healthy = [(DCGM_ROW_REMAP_FAILURE, 1)], [(DCGM_ROW_REMAP_FAILURE, 0)]

    def _gpu_thermal(self) -> None:
        temperature = int_param(self.params, "temperature_c", 40, 200)
        self.fields = {"temperature": temperature,
                       "throttle_reasons": ("or", experiments.SW_THERMAL | experiments.HW_THERMAL)}
        self.dcgm = [(DCGM_GPU_TEMP, temperature), (DCGM_THERMAL_VIOLATION, 10**9)]
        self.dcgm_healthy = [(DCGM_GPU_TEMP, 40), (DCGM_THERMAL_VIOLATION, 0)]

    def _gpu_power(self) -> None:
        power_w = int_param(self.params, "power_w", 1, 5000)
        self.fields = {"power_mw": power_w * 1000,
                       "throttle_reasons": ("or", experiments.SW_POWER_CAP | experiments.HW_POWER_BRAKE)}
        self.dcgm, self.dcgm_healthy = [(DCGM_POWER_VIOLATION, 10**9)], [(DCGM_POWER_VIOLATION, 0)]

    def _gpu_nvlink(self) -> None:
        count = int_param(self.params, "count", 1, 10**12)
        self.fields = {"nvlink_crc_flit_errors": ("add", count), "nvlink_replay_errors": ("add", max(1, count // 10))}
        if self.params.get("link_down"):
            self.fields["nvlink_down"] = ("or", 1)
        self._xid_line(74, "NVLINK: Link 0 (0x00000000): fatal error detected on link 0")
        self.dcgm, self.dcgm_healthy = [(DCGM_NVLINK_CRC_FLIT, count)], [(DCGM_NVLINK_CRC_FLIT, 0)]

    def _gpu_fallen_off_bus(self) -> None:
        self.xid = 79
        self.fields = {"lost": True}
        self._xid_line(79, "GPU has fallen off the bus.")
        self.kernel_lines.append("NVRM: GPU 0000:{bus}: GPU has fallen off the bus.")
        # DCGM cannot make a GPU vanish; the XID is the closest thing it can inject.
        self.dcgm, self.dcgm_healthy = [(DCGM_XID_ERRORS, 79)], [(DCGM_XID_ERRORS, 0)]

    def _xid_line(self, xid: int, text: str) -> None:
        self.kernel_lines.append("NVRM: Xid (PCI:0000:{bus}): %d, pid='<unknown>', name=<unknown>, %s" % (xid, text))

    # -- what each backend does --------------------------------------------------------------------
    def nvml_actions(self) -> List[str]:
        actions = ["set GPU %d %s" % (self.gpu, ", ".join("%s %s" % (k, _describe(v)) for k, v in self.fields.items()))
                   ] if self.fields else []
        xid = self.xid if self.xid is not None else None
        if xid is not None:
            actions.append("queue an NVML XID %d event on GPU %d" % (xid, self.gpu))
        return actions

    def dcgm_commands(self, healthy: bool = False) -> List[List[str]]:
        """``dcgmi test --inject`` argv per field. --gpuid is explicit: dcgmi's default is 1, not 0."""
        pairs = self.dcgm_healthy if healthy else self.dcgm
        return [["dcgmi", "test", "--inject", "--gpuid", str(self.gpu), "-f", str(field), "-v", str(value)]
                for field, value in pairs]


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return ("+= %s" if value[0] == "add" else "|= 0x%x") % value[1]
    return "= %s" % (value,)


def _backends(spec: Mapping[str, Any], lab: bool) -> List[str]:
    chosen = spec.get("backend") or "default"
    experiment = experiments.get(spec["experiment"])
    if chosen == "default":
        return list(experiment.lab_backends if lab else experiment.site_backends)
    listed = [b.strip() for b in str(chosen).split("+") if b.strip()]
    for backend in listed:
        if backend not in BACKENDS:
            raise FieldError("backend", "unknown GPU fault backend %r; backends: %s (join with +)"
                             % (backend, ", ".join(BACKENDS)))
    if "nvml_sim" in listed and not lab:
        raise FieldError("backend", "nvml_sim writes the lab's fake NVML state; a real node has real GPUs")
    return listed


def _state_dir(ctx: FaultContext, node: str) -> str:
    path = os.path.join(ctx.lab_dir, "gpus", node)
    if not os.path.isdir(path):
        raise FieldError("target", "%s has no simulated GPUs in %s" % (node, path))
    return path


def _kernel_log(ctx: FaultContext, node: str) -> str:
    # The lab's agents follow their own file; a real node's kernel log is /dev/kmsg.
    return os.path.join(ctx.lab_dir, "kmsg", "%s.log" % node) if ctx.lab_dir else DEV_KMSG


# -- the family interface ----------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    ctx = FaultContext(lab_dir=spec.get("lab_dir"))
    lab = bool(ctx.lab_dir)
    fault = Fault(spec["experiment"], spec.get("params") or {})
    actions: List[str] = []
    simulated: List[str] = []
    for backend in _backends(spec, lab):
        if backend == "nvml_sim":
            actions += ["%s: %s" % (spec["node"], a) for a in fault.nvml_actions()]
            simulated.append("nvml_sim: the GPU state is the lab's fake NVML")
        elif backend == "kmsg":
            for line in fault.kernel_lines:
                actions.append("%s: write to %s: %s" % (spec["node"], _kernel_log(ctx, spec["node"]), line))
        else:
            actions += ["%s: %s (re-injected while the drill runs)" % (spec["node"], " ".join(argv))
                        for argv in fault.dcgm_commands()]
    # "resolved": what the plan learnt that decides the loop's expectations (the XID's severity).
    resolved = {"xid_severity": fault.params["xid_severity"]} if "xid_severity" in fault.params else {}
    return {"actions": actions, "simulated": simulated, "missing": [], "backends": _backends(spec, lab),
            "params": fault.params, "resolved": resolved}


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    lab = bool(ctx.lab_dir)
    node = spec["node"]
    fault = Fault(spec["experiment"], spec.get("params") or {})
    undo: Dict[str, Any] = {"backends": _backends(spec, lab), "gpu": fault.gpu, "experiment": spec["experiment"],
                            "params": fault.params}
    state_dir = _state_dir(ctx, node) if lab else None
    bus = _bus(state_dir, fault.gpu) if state_dir else str(fault.params.get("pci_bus", "00:00.0"))
    for backend in undo["backends"]:
        if backend == "nvml_sim":
            undo["nvml_sim"] = _inject_nvml(state_dir, fault)
        elif backend == "kmsg":
            lines = [line.format(bus=bus) for line in fault.kernel_lines]
            undo["kmsg"] = _write_kernel_lines(_kernel_log(ctx, node), lines)
        else:
            undo["dcgm"] = {"commands": [" ".join(argv) for argv in fault.dcgm_commands()]}
            for argv in fault.dcgm_commands():
                _run(argv)
    undo["agent_must_forget"] = fault.xid is not None or "kmsg" in undo["backends"]
    return undo


def reinject(undo: Mapping[str, Any]) -> List[str]:
    """DCGM's injected values expire: run the injections again; returns the commands run."""
    if "dcgm" not in (undo.get("backends") or []):
        return []
    fault = Fault(undo["experiment"], undo.get("params") or {})
    for argv in fault.dcgm_commands():
        _run(argv)
    return [" ".join(argv) for argv in fault.dcgm_commands()]


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """``undo`` is the spec merged with what inject returned (only the spec after a crash mid-inject)."""
    node = undo["node"]
    reverted: List[str] = []
    if "backends" not in undo:
        # Injection crashed before its undo was written: the GPU goes back to healthy, the only
        # safe guess (the steady-state check before the inject found the node healthy).
        undo = dict(undo, backends=_backends(undo, bool(ctx.lab_dir)),
                    gpu=(undo.get("params") or {}).get("gpu", 0), nvml_sim={"previous": None}, agent_must_forget=True)
    if "nvml_sim" in undo.get("backends", []) and ctx.lab_dir:
        state_dir = os.path.join(ctx.lab_dir, "gpus", node)
        if os.path.isdir(state_dir):
            reverted += _revert_nvml(state_dir, int(undo.get("gpu") or 0), undo.get("nvml_sim") or {})
    if "dcgm" in undo.get("backends", []):
        fault = Fault(undo["experiment"], undo.get("params") or {})
        for argv in fault.dcgm_commands(healthy=True):
            _run(argv)
            reverted.append(" ".join(argv))
    if undo.get("agent_must_forget") and ctx.lab_dir and forget_xids(ctx.lab_dir, node):
        reverted.append("told the health agent of %s to forget its XID history (SIGUSR1)" % node)
    return {"reverted": reverted, "already": not reverted}


# -- nvml_sim ----------------------------------------------------------------------------------
def _bus(state_dir: str, gpu: int) -> str:
    gpus = fake_gpu_state.read(state_dir)["gpus"]
    if gpu >= len(gpus):
        raise FieldError("params.gpu", "GPU %d does not exist; the node has %d" % (gpu, len(gpus)))
    return gpus[gpu]["pci_bus_id"].split(":", 1)[1]


def _inject_nvml(state_dir: str, fault: Fault) -> Dict[str, Any]:
    current = fake_gpu_state.read(state_dir)["gpus"][fault.gpu]
    previous = {name: current[name] for name in fault.fields}
    values = {}
    for name, change in fault.fields.items():
        if isinstance(change, tuple):
            values[name] = current[name] + change[1] if change[0] == "add" else current[name] | change[1]
        else:
            values[name] = change
    if values:
        fake_gpu_state.set_fields(state_dir, fault.gpu, **values)
    event = fake_gpu_state.inject_xid(state_dir, fault.gpu, fault.xid) if fault.xid is not None else None
    return {"previous": previous, "set": values, "event": event}


def _revert_nvml(state_dir: str, gpu: int, undo: Mapping[str, Any]) -> List[str]:
    done: List[str] = []
    previous = undo.get("previous")
    if previous is None:
        fake_gpu_state.clear(state_dir)
        return ["cleared the fake GPU state of %s (no undo was recorded)" % os.path.basename(state_dir)]
    if previous and fake_gpu_state.set_fields(state_dir, gpu, **previous):
        done.append("restored GPU %d: %s" % (gpu, ", ".join("%s=%s" % kv for kv in sorted(previous.items()))))
    event = undo.get("event")
    if event:
        try:
            os.unlink(os.path.join(state_dir, "events", event))
            done.append("removed the undelivered XID event %s" % event)
        except FileNotFoundError:
            pass  # delivered to the agent: forget_xids handles that
    return done


# -- kmsg and dcgm -----------------------------------------------------------------------------
def _write_kernel_lines(path: str, lines: List[str]) -> Dict[str, Any]:
    if path == DEV_KMSG:
        # One write() per record; the level <3> (err) keeps the line past level-based filters.
        # User-space lines carry LOG_USER, which the agent's kmsg reader accepts.
        with open(path, "w") as handle:
            for line in lines:
                handle.write("<3>%s\n" % line)
                handle.flush()
    else:
        with open(path, "a") as handle:
            for line in lines:
                handle.write(line + "\n")
    return {"path": path, "lines": lines}


def _run(argv: List[str]) -> None:
    if shutil.which(argv[0]) is None:
        raise GpufleetError("%s is not installed on this node: the dcgm backend needs DCGM (datacenter-gpu-manager)"
                            % argv[0])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-500:]
        raise GpufleetError("%s failed (rc %d): %s" % (" ".join(argv), done.returncode, said))
