# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The validation a node passes before it returns to service (the ``validate`` phase). Pure.

After a GPU reset or a fabric-manager restart the agent may see a healthy GPU that still computes
wrong results, dies under load or runs at half its rate. So before ``resume``, a burn runs on the
fenced node itself, as a Slurm job in a maintenance reservation of that node (nothing else can
land there meanwhile), and its output decides:

* ``auto`` - what the node has: ``dcgmi diag`` where DCGM is installed, else gpu-burn, else nothing
  (the node is not validated, and the record says so): on by default wherever a tool exists;
* ``lab`` - the lab's ``gpu_burn_sim`` (its GPUs are files; it prints what gpu-burn prints, from
  their state);
* ``gpu_burn`` - ``gpu_burn -d -m 90% <seconds>``;
* ``dcgm_diag`` - ``dcgmi diag -r <level>`` (2: about 2 minutes; 3: about 15);
* ``nccl_tests`` - nccl-tests' ``all_reduce_perf`` across the node's GPUs (``-g <gpus>``): the
  NVLink/NVSwitch fabric under a collective, judged against a bus bandwidth floor (the lab's
  ``all_reduce_perf_sim`` prints what it prints, from the simulated GPUs' NVLink state).

The output is read by the drills' parsers (``health/burn_output.py``). It passes when the verdict
is ``ok`` (gpu-burn, all_reduce_perf) or ``pass``/``warn`` (DCGM: a warning such as persistence
mode off does not keep a node out), and, for a burn, no GPU runs below ``min_ratio`` of the
node's fastest; for all_reduce_perf, no value is out of bounds and the average bus bandwidth is
at least ``min_busbw_gbps``. A run cut short, with no result lines or summary, never passes.

Each setting may differ per node pool (``pools``: pool name -> settings, over the defaults): a
pool of H100s over NVLink validates with all_reduce_perf and its floor, a pool of L40S with a burn.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shlex
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int, check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import burn_output
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_node

BACKENDS = ("auto", "lab", "gpu_burn", "dcgm_diag", "nccl_tests")
# auto, on a node: DCGM's diagnostic where dcgmi is installed (it checks more than a burn), else
# gpu-burn, else nothing. The job's first line names what it ran (AUTO_MARK <tool>), so its output
# says how to read the rest; a node with neither is not validated, as with backend none, and says so.
AUTO_MARK = "gpufleet-validate: "
AUTO_TOOLS = ("dcgm_diag", "gpu_burn")
NONE = "none"  # no validation: the phase is recorded as skipped
POOL_LABEL = "gpufleet.io/pool"
# What a pool may set over the defaults (``pools``).
POOL_SETTINGS = ("backend", "seconds", "dcgm_level", "min_ratio", "min_busbw_gbps", "nccl_tests")
# all_reduce_perf from 8 MB to 1 GB, doubling, one process driving every GPU of the node (-g): a
# few seconds on a healthy node. Its average bus bandwidth depends on these sizes, so a floor is
# measured with them.
NCCL_TESTS_ARGS = ("-b", "8M", "-e", "1G", "-f", "2")
NCCL_TESTS_SECONDS = 120
NAME_PREFIX = "gpufleet-validate-"
PASSING = ("ok", "pass", "warn")
# The scheduler's limit is the burn plus this: gpu-burn allocates memory before its timed burn,
# DCGM's level 3 runs about 15 minutes whatever the seconds say.
START_MARGIN_S = 60
DCGM_LEVEL_SECONDS = {2: 180, 3: 1200}
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
_POOL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_PROGRAM = re.compile(r"[A-Za-z0-9_./+-]{1,4096}")


def names(remediation_id: str) -> str:
    """The reservation's and the job's name: derived from the remediation id, so a rerun after a crash
    finds what the first run made, and short and plain, whatever the id holds."""
    return NAME_PREFIX + hashlib.sha256(remediation_id.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Validation:
    node: str
    remediation_id: str
    backend: str
    seconds: int
    min_ratio: float
    output_dir: str
    user: str
    lab_dir: Optional[str] = None
    dcgm_level: int = 2
    gpus: Optional[int] = None
    min_busbw_gbps: float = 0.0
    nccl_tests: str = "all_reduce_perf"
    # The admit phase: the node is a replacement that came up fenced; passed, it takes work at once.
    admit: bool = False

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "Validation":
        """Each field checked; a bad one raises FieldError naming it, before anything is done."""
        node = check_node(params.get("node"))
        remediation_id = params.get("remediation_id")
        if not isinstance(remediation_id, str) or not remediation_id.strip():
            raise FieldError("remediation_id", "must be the remediation's id")
        backend = params.get("backend")
        if backend not in BACKENDS:
            raise FieldError("backend", "must be one of %s, not %r" % (", ".join(BACKENDS), backend))
        seconds = check_int(params.get("seconds"), "seconds", 1, 86400)
        min_ratio = check_number(params.get("min_ratio"), "min_ratio", minimum=0, maximum=1)
        output_dir = params.get("output_dir")
        if not isinstance(output_dir, str) or not os.path.isabs(output_dir):
            raise FieldError("output_dir", "must be an absolute directory that the node's jobs write to and "
                                           "this host reads (a shared file system on a real site)")
        user = params.get("user")
        if not isinstance(user, str) or not _USER.fullmatch(user):
            raise FieldError("user", "must be a user name (the reservation admits its jobs alone), not %r" % user)
        lab_dir = params.get("lab_dir")
        if backend == "lab" and not (isinstance(lab_dir, str) and os.path.isabs(lab_dir)):
            raise FieldError("lab_dir", "must be the lab's absolute directory with backend=lab")
        level = check_int(params.get("dcgm_level", 2), "dcgm_level", 2, 3)
        gpus = params.get("gpus")
        if gpus is not None:
            gpus = check_int(gpus, "gpus", 1, 1024)
        floor = check_number(params.get("min_busbw_gbps") or 0, "min_busbw_gbps", minimum=0, maximum=100000)
        program = params.get("nccl_tests") or "all_reduce_perf"
        if not isinstance(program, str) or not _PROGRAM.fullmatch(program):
            raise FieldError("nccl_tests", "must be all_reduce_perf's path or name on the node's PATH, not %r"
                             % (program,))
        if backend == "nccl_tests" and not floor:
            raise FieldError("min_busbw_gbps", "backend nccl_tests needs its bus bandwidth floor in GB/s: measure "
                                               "a healthy node of the pool with the same arguments (%s -g <gpus>) "
                                               "and take a margin below its 'Avg bus bandwidth'"
                             % " ".join(NCCL_TESTS_ARGS))
        return cls(node=node, remediation_id=remediation_id, backend=backend, seconds=seconds,
                   min_ratio=float(min_ratio), output_dir=output_dir, user=user, lab_dir=lab_dir,
                   dcgm_level=level, gpus=gpus, min_busbw_gbps=float(floor), nccl_tests=program,
                   admit=bool(params.get("admit")))

    @property
    def name(self) -> str:
        return names(("admit " if self.admit else "") + self.remediation_id)

    @property
    def tool(self) -> str:
        return self.backend if self.backend in ("dcgm_diag", "nccl_tests") else "gpu_burn"

    @property
    def output(self) -> str:
        return os.path.join(self.output_dir, self.name + ".out")

    def command(self, gpus: Optional[int] = None) -> Tuple[str, ...]:
        """What the job runs; all_reduce_perf drives the node's ``gpus`` (all of them) from one process."""
        if self.backend == "auto":
            dcgm, burn = (shlex.join(replace(self, backend=tool).command(gpus)) for tool in AUTO_TOOLS)
            return ("sh", "-c", "if command -v dcgmi >/dev/null 2>&1; then echo '{mark}dcgm_diag'; exec {dcgm}; "
                                "elif command -v gpu_burn >/dev/null 2>&1; then echo '{mark}gpu_burn'; exec {burn}; "
                                "else echo '{mark}none'; fi".format(mark=AUTO_MARK, dcgm=dcgm, burn=burn))
        if self.backend == "nccl_tests":
            return (self.nccl_tests, *NCCL_TESTS_ARGS, "-g", str(self.gpus or gpus or 1))
        if self.backend == "lab":
            return (os.path.join(str(self.lab_dir), "bin", "gpu_burn_sim"), "--state-dir",
                    os.path.join(str(self.lab_dir), "gpus", self.node), "--seconds", str(self.seconds))
        if self.backend == "dcgm_diag":
            return ("dcgmi", "diag", "-r", str(self.dcgm_level))
        return ("gpu_burn", "-d", "-m", "90%", str(self.seconds))

    @property
    def limit_s(self) -> int:
        """How long the job may take in all: Slurm's --time, and the module's wait."""
        run = {"dcgm_diag": DCGM_LEVEL_SECONDS[self.dcgm_level], "nccl_tests": NCCL_TESTS_SECONDS,
               "auto": max(DCGM_LEVEL_SECONDS[self.dcgm_level], self.seconds)}.get(self.backend, self.seconds)
        return run + START_MARGIN_S

    def batch_job(self, gpus: int) -> BatchJob:
        return BatchJob(name=self.name, node=self.node, command=self.command(gpus),
                        minutes=math.ceil(self.limit_s / 60.0), output=self.output, gpus=gpus,
                        reservation=self.name)


def judge(text: str, tool: str, min_ratio: float, min_busbw_gbps: float = 0.0) -> Dict[str, Any]:
    """The burn's output -> ``passed``, ``verdict``, ``why`` (empty when it passed), ``slow`` GPUs and
    the parsed result's summary."""
    if tool == "nccl_tests":
        return judge_bandwidth(text, min_busbw_gbps)
    result = burn_output.parse_output(text, tool)
    reasons: List[str] = []
    verdict = result.get("verdict")
    if verdict not in PASSING:
        why = burn_output.summary(result)["why"]
        reasons.append("the burn gave no verdict: %s" % why if verdict == "unknown" else why)
    slow = slow_gpus(result.get("gflops") or [], min_ratio)
    slow_indices = [gpu for gpu, ratio in slow]
    if slow:
        reasons.append("GPU(s) %s below %d%% of the node's fastest GPU (%s)" % (
            ", ".join(str(gpu) for gpu in slow_indices), round(min_ratio * 100),
            ", ".join("%d%%" % round(ratio * 100) for gpu, ratio in slow)))
    return {"passed": not reasons, "verdict": verdict, "why": "; ".join(reasons), "slow": slow_indices,
            "gflops": result.get("gflops") or [], "tool": tool}


def judge_auto(text: str, min_ratio: float) -> Dict[str, Any]:
    """backend auto's output: the tool its first line names, judged as that tool's; ``passed`` None
    (not validated, nothing wrong found) when the node has none."""
    marked = [line[len(AUTO_MARK):].strip() for line in text.splitlines() if line.startswith(AUTO_MARK)]
    tool = marked[0] if marked else None
    if tool == NONE:
        return {"passed": None, "verdict": NONE, "why": "", "slow": [], "gflops": [], "tool": NONE,
                "skipped": "no validation tool on the node (dcgmi, gpu_burn): not validated"}
    if tool not in AUTO_TOOLS:
        return {"passed": False, "verdict": "unknown", "slow": [], "gflops": [], "tool": "auto",
                "why": "the validation job did not say which tool it ran: %s" % (_last_line(text) or "no output")}
    return judge(text, tool, min_ratio)


def judge_bandwidth(text: str, min_busbw_gbps: float) -> Dict[str, Any]:
    """all_reduce_perf's output: a summary, no value out of bounds, and the average bus bandwidth at
    least the floor."""
    parsed = burn_output.parse_all_reduce_perf(text)
    verdict = burn_output.nccl_verdict(parsed)
    busbw = parsed["avg_busbw_gbps"]
    reasons: List[str] = []
    if verdict == "unknown":
        reasons.append("all_reduce_perf printed no summary (it failed or was cut short): %s"
                       % (_last_line(text) or "no output"))
    elif verdict == "fail":
        reasons.append("all_reduce_perf found %s values out of bounds (wrong results)" % parsed["out_of_bounds"])
    if busbw is not None and busbw < min_busbw_gbps:
        reasons.append("bus bandwidth %.1f GB/s below the floor of %.1f GB/s (all_reduce_perf)"
                       % (busbw, min_busbw_gbps))
    return {"passed": not reasons, "verdict": verdict, "why": "; ".join(reasons), "slow": [], "gflops": [],
            "busbw_gbps": busbw, "min_busbw_gbps": min_busbw_gbps, "tool": "nccl_tests"}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def for_pool(params: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings for the node's ``pool``: ``pools[pool]`` over the defaults in ``params``. Every
    pool's entry is checked (a typo in another pool's is found now, not at that pool's first
    remediation); a bad one raises FieldError naming ``pools.<pool>.<setting>``."""
    pools = params.get("pools") or {}
    if not isinstance(pools, Mapping):
        raise FieldError("pools", "must map a pool name to its validation settings")
    for name, settings in pools.items():
        if not isinstance(name, str) or not _POOL.fullmatch(name):
            raise FieldError("pools", "%r is not a pool name (a node's %s label value)" % (name, POOL_LABEL))
        if not isinstance(settings, Mapping):
            raise FieldError("pools.%s" % name, "must be a mapping of settings (%s)" % ", ".join(POOL_SETTINGS))
        unknown = sorted(set(settings) - set(POOL_SETTINGS))
        if unknown:
            raise FieldError("pools.%s.%s" % (name, unknown[0]), "unknown setting; a pool may set %s"
                             % ", ".join(POOL_SETTINGS))
        merged = dict(params, **settings)
        if merged.get("backend") == NONE:
            continue
        try:
            Validation.from_params(merged)
        except FieldError as exc:
            if exc.field not in POOL_SETTINGS:
                raise  # not a pool's to set (the node, the output directory): named as it is
            raise FieldError("pools.%s.%s" % (name, exc.field), exc.message) from None
    pool = params.get("pool")
    return dict(params, **pools[pool]) if pool in pools else dict(params)


def slow_gpus(gflops: List[float], min_ratio: float) -> List[Tuple[int, float]]:
    """(index, share of the fastest) of each GPU below ``min_ratio`` of the node's fastest."""
    best = max(gflops, default=0.0)
    if best <= 0 or min_ratio <= 0:
        return []
    return [(gpu, rate / best) for gpu, rate in enumerate(gflops) if rate < min_ratio * best]


def failed_reason(reason: Optional[str], why: str, remediation_id: str) -> str:
    """The Slurm reason a node that failed its validation keeps: ours (``gpufleet:``), so our own resume
    may lift it once a human says so, and short enough for Slurm."""
    text = "gpufleet: validation failed: %s (remediation %s)" % (why, remediation_id)
    return text if len(text) <= 240 else text[:237] + "..."
