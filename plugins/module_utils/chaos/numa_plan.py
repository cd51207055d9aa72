# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Pure helpers of the NUMA chaos family: the NUMA topology from ``numactl --hardware``, the far
node, the checked knobs, and the load's command line (``timeout`` + ``numactl`` + ``stress-ng``).

No I/O here (import-linter keeps it so): numa.py runs the commands these lines describe.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import bool_param, int_param
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import fault_id as check_fault_id
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

REMOTE, PRESSURE, CPU = "numa_remote_memory", "numa_memory_pressure", "cpu_saturation"
EXPERIMENTS = (REMOTE, PRESSURE, CPU)
VIAS = ("slurm", "process")
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
KNOBS = experiments.get("cpu_saturation").knobs  # the same for the three NUMA and CPU experiments
SCOPES = ("container", "pod")
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
KUBELET_RESTART = ("systemctl", "restart", "kubelet")
DEFAULTS = {CPU: {"seconds": 60, "workers": 1, "load_percent": 100},
            PRESSURE: {"seconds": 60, "workers": 1, "memory_percent": 50},
            REMOTE: {"seconds": 60, "workers": 1, "memory_percent": 10}}
MAX_SECONDS = 3600
# Both stress-ng's own --timeout and an outer `timeout` end the load; the outer one a little later
# (and SIGKILL after a grace), so a stress-ng that ignores its timeout still ends.
OUTER_MARGIN_S = 10
KILL_AFTER_S = 5
JOB_PREFIX = "gpufleet-chaos-numa-"

_AVAILABLE = re.compile(r"^available:\s*(\d+)\s+nodes?\s*\(([^)]*)\)", re.M)
_CPUS = re.compile(r"^node\s+(\d+)\s+cpus:\s*(.*)$", re.M)
_SIZE = re.compile(r"^node\s+(\d+)\s+(size|free):\s*(\d+)\s*MB", re.M)


# -- topology --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Topology:
    nodes: Tuple[int, ...]
    cpus: Mapping[int, Tuple[int, ...]]
    size_mb: Mapping[int, int]
    free_mb: Mapping[int, int]
    distances: Mapping[int, Mapping[int, int]]


def parse_hardware(text: str) -> Topology:
    """``numactl --hardware``: nodes, their CPUs, size and free memory (MB), the distance matrix."""
    found = _AVAILABLE.search(text or "")
    if not found:
        raise ValueError("not numactl --hardware output (no 'available: N nodes' line): %r" % (text or "")[:200])
    nodes = tuple(_ranges(found.group(2)))
    cpus = {int(n): tuple(int(c) for c in rest.split()) for n, rest in _CPUS.findall(text)}
    size = {int(n): int(mb) for n, kind, mb in _SIZE.findall(text) if kind == "size"}
    free = {int(n): int(mb) for n, kind, mb in _SIZE.findall(text) if kind == "free"}
    distances: Dict[int, Dict[int, int]] = {}
    lines = text.split("node distances:", 1)[1].strip().splitlines() if "node distances:" in text else []
    if lines:
        columns = [int(word) for word in lines[0].split()[1:]]
        for line in lines[1:]:
            head, _sep, rest = line.partition(":")
            if not head.strip().isdigit():
                break
            distances[int(head)] = dict(zip(columns, (int(w) for w in rest.split()), strict=False))
    return Topology(nodes, cpus, size, free, distances)


def _ranges(text: str) -> List[int]:
    """``0-1,3`` or ``0 1 3`` -> [0, 1, 3]."""
    out: List[int] = []
    for part in re.split(r"[,\s]+", text.strip()):
        if "-" in part:
            low, high = part.split("-", 1)
            out += range(int(low), int(high) + 1)
        elif part:
            out.append(int(part))
    return out


def far_node(topology: Topology, near: int) -> int:
    """The node farthest from ``near`` (the largest distance; the lowest number on a tie); ``near``
    itself on a one-node machine, where no memory can be remote."""
    row = topology.distances.get(near) or {}
    others = [n for n in topology.nodes if n != near]
    if not others:
        return near
    return max(others, key=lambda n: (row.get(n, 0), -n))


# -- the knobs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Load:
    experiment: str
    node: str
    fault_id: str
    seconds: int
    workers: int
    load_percent: Optional[int]
    memory_percent: Optional[int]
    near_node: Optional[int]
    far_node: Optional[int]
    via: str
    output: str
    topology_manager_policy: Optional[str]
    topology_manager_scope: Optional[str] = None
    # Given explicitly (None: the default path on a site; in the lab, no kubelet to change).
    kubelet_config: Optional[str] = None
    kubelet_restart: Tuple[str, ...] = KUBELET_RESTART

    @property
    def job_name(self) -> str:
        return JOB_PREFIX + self.fault_id

    @property
    def minutes(self) -> int:
        """Slurm's --time, whole minutes: the load, the outer timeout's margin and a minute to start."""
        return -(-(self.seconds + OUTER_MARGIN_S + KILL_AFTER_S + 60) // 60)


def check(spec: Mapping[str, Any], lab: bool) -> Load:
    """The spec as a Load; FieldError naming the bad field (``params.<knob>``, ``target``, ...)."""
    experiment = spec.get("experiment")
    if experiment not in EXPERIMENTS:
        raise FieldError("experiment", "the numa family runs %s, not %r" % (", ".join(EXPERIMENTS), experiment))
    node = spec.get("node")
    if not isinstance(node, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", node):
        raise FieldError("target", "must be one node name, not %r" % (node,))
    fault_id = check_fault_id(spec.get("fault_id"), label=True)  # in the load job's name
    given = spec.get("params") or {}
    if not isinstance(given, Mapping):
        raise FieldError("params", "must be a mapping, got %r" % (given,))
    for knob in given:
        if knob not in KNOBS:
            raise FieldError("params.%s" % knob, "unknown knob of %s; knobs: %s" % (experiment, ", ".join(KNOBS)))
    params = dict(DEFAULTS[experiment])
    params.update({k: v for k, v in given.items() if v is not None})
    if experiment == CPU and "memory_percent" in given:
        raise FieldError("params.memory_percent", "is for the memory experiments; cpu_saturation uses load_percent")
    if experiment != CPU and "load_percent" in given:
        raise FieldError("params.load_percent", "is for cpu_saturation; the memory experiments use memory_percent")
    if experiment != REMOTE and "far_node" in given:
        raise FieldError("params.far_node", "is for numa_remote_memory only")
    policy = params.get("topology_manager_policy")
    if policy is not None:
        if policy not in POLICIES:
            raise FieldError("params.topology_manager_policy", "must be one of %s, not %r"
                             % (", ".join(POLICIES), policy))
        if not bool_param(params, "allow_kubelet_change"):
            raise FieldError("params.topology_manager_policy", "changes the kubelet's configuration: set "
                             "params.allow_kubelet_change true to allow it (the drill restores it)")
    else:
        bool_param(params, "allow_kubelet_change")
        for knob in ("topology_manager_scope", "kubelet_config", "kubelet_restart"):
            if knob in given:
                raise FieldError("params.%s" % knob, "is for a kubelet change: give params.topology_manager_policy")
    scope = params.get("topology_manager_scope")
    if scope is not None and scope not in SCOPES:
        raise FieldError("params.topology_manager_scope", "must be one of %s, not %r" % (", ".join(SCOPES), scope))
    kubelet_config = params.get("kubelet_config")
    if kubelet_config is not None and (not isinstance(kubelet_config, str) or not os.path.isabs(kubelet_config)
                                       or "\n" in kubelet_config
                                       or os.path.basename(kubelet_config) in ("", ".", "..")):
        raise FieldError("params.kubelet_config", "must be an absolute file path, not %r" % (kubelet_config,))
    restart = params.get("kubelet_restart", list(KUBELET_RESTART))
    if (not isinstance(restart, (list, tuple)) or not restart
            or not all(isinstance(word, str) and word for word in restart)):
        raise FieldError("params.kubelet_restart", "must be a command as a list of words, e.g. %s, not %r"
                         % (list(KUBELET_RESTART), restart))
    via = params.get("via", "slurm")
    if via not in VIAS:
        raise FieldError("params.via", "must be one of %s, not %r" % (", ".join(VIAS), via))
    output = params.get("output", "/dev/null")
    if not isinstance(output, str) or not output.startswith("/") or "\n" in output:
        raise FieldError("params.output", "must be an absolute path on the node, not %r" % (output,))
    return Load(
        experiment=experiment, node=node, fault_id=fault_id,
        seconds=int_param(params, "seconds", 1, MAX_SECONDS),
        workers=int_param(params, "workers", 1, 1024),
        load_percent=int_param(params, "load_percent", 1, 100) if experiment == CPU else None,
        # Never the whole node: the protected job and the OS must keep memory (1-95).
        memory_percent=int_param(params, "memory_percent", 1, 95) if experiment != CPU else None,
        near_node=int_param(params, "near_node", 0, 1023) if "near_node" in params else None,
        far_node=int_param(params, "far_node", 0, 1023) if "far_node" in params else None,
        via=str(via), output=output, topology_manager_policy=policy, topology_manager_scope=scope,
        kubelet_config=os.path.normpath(kubelet_config) if kubelet_config else None,
        kubelet_restart=tuple(restart),
    )


# -- placement and the command ---------------------------------------------------------------------
def placement(load: Load, topology: Optional[Topology]) -> Dict[str, Any]:
    """Which NUMA nodes the load's CPUs and memory use, and what is simulated about it.

    ``topology`` None: numactl is not there to read it (the plan reports that as missing)."""
    if load.experiment == CPU:
        return {"cpu_node": load.near_node, "mem_node": None, "simulated": []}
    near = load.near_node if load.near_node is not None else (topology.nodes[0] if topology else 0)
    if topology is not None and near not in topology.nodes:
        raise FieldError("params.near_node", "no NUMA node %d here; nodes: %s" % (near, list(topology.nodes)))
    if load.experiment == PRESSURE:
        return {"cpu_node": near, "mem_node": near, "simulated": []}
    far = load.far_node if load.far_node is not None else (far_node(topology, near) if topology else near)
    if topology is not None and far not in topology.nodes:
        raise FieldError("params.far_node", "no NUMA node %d here; nodes: %s" % (far, list(topology.nodes)))
    simulated = []
    if far == near:
        simulated.append("one NUMA node: membind to node %d, the local node; the drill runs the load but cannot "
                         "make memory remote" % near)
    return {"cpu_node": near, "mem_node": far, "simulated": simulated}


def vm_bytes(load: Load, topology: Optional[Topology], mem_node: Optional[int]) -> str:
    """Per-worker ``--vm-bytes``: memory_percent of the bound node's free memory, split among the
    workers (stress-ng's own N% is of the whole machine, not of one node)."""
    free = (topology.free_mb.get(mem_node) if topology and mem_node is not None else None)
    if not free:
        return "%d%%" % load.memory_percent  # no topology: stress-ng's share of the machine
    return "%dM" % max(1, free * (load.memory_percent or 0) // 100 // load.workers)


def command(load: Load, topology: Optional[Topology]) -> List[str]:
    """``timeout --foreground -k 5 <s+10> [numactl --cpunodebind=N --membind=M] stress-ng ... --timeout <s>s``.

    --foreground: without it ``timeout`` moves itself and stress-ng into a process group of their
    own, and Slurm's proctrack/pgid, which kills the job's group at scancel, misses them (seen in the
    lab: the load ran on after its job was cancelled). stress-ng ends its own workers."""
    where = placement(load, topology)
    argv = ["timeout", "--foreground", "-k", str(KILL_AFTER_S), str(load.seconds + OUTER_MARGIN_S)]
    if where["cpu_node"] is not None or where["mem_node"] is not None:
        argv.append("numactl")
        if where["cpu_node"] is not None:
            argv.append("--cpunodebind=%d" % where["cpu_node"])
        if where["mem_node"] is not None:
            argv.append("--membind=%d" % where["mem_node"])
    argv.append("stress-ng")
    if load.experiment == CPU:
        argv += ["--cpu", str(load.workers), "--cpu-load", str(load.load_percent)]
    else:
        # --vm-keep: keep the memory mapped for the whole run (the pressure lasts), not remapped per pass.
        argv += ["--vm", str(load.workers), "--vm-bytes", vm_bytes(load, topology, where["mem_node"]), "--vm-keep"]
    return [*argv, "--timeout", "%ds" % load.seconds, "--metrics-brief"]


def wrap(load: Load, topology: Optional[Topology]) -> str:
    return shlex.join(command(load, topology))


def describe(load: Load) -> str:
    if load.experiment == CPU:
        return "%d stress-ng CPU worker(s) at %d%% for %d s" % (load.workers, load.load_percent, load.seconds)
    return "%d stress-ng VM worker(s) holding %d%% of the node's free memory for %d s" % (
        load.workers, load.memory_percent, load.seconds)
