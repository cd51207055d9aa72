# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The validation a node passes before it returns to service (the ``validate`` phase). Pure.

After a GPU reset or a fabric-manager restart the agent may see a healthy GPU that still computes
wrong results, dies under load or runs at half its rate. So before ``resume``, a burn runs on the
fenced node itself, as a Slurm job in a maintenance reservation of that node (nothing else can
land there meanwhile), and its output decides:

* ``lab`` - the lab's ``gpu_burn_sim`` (its GPUs are files; it prints what gpu-burn prints, from
  their state);
* ``gpu_burn`` - ``gpu_burn -d -m 90% <seconds>``;
* ``dcgm_diag`` - ``dcgmi diag -r <level>`` (2: about 2 minutes; 3: about 15).

The output is read by the drills' parsers (``health/burn_output.py``). It passes when the verdict
is ``ok`` (gpu-burn) or ``pass``/``warn`` (DCGM: a warning such as persistence mode off does not
keep a node out), and, for a burn, no GPU runs below ``min_ratio`` of the node's fastest GPU. A
burn cut short, with no result lines, never passes.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int, check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import burn_output
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_node

BACKENDS = ("lab", "gpu_burn", "dcgm_diag")
NAME_PREFIX = "gpufleet-validate-"
PASSING = ("ok", "pass", "warn")
# The scheduler's limit is the burn plus this: gpu-burn allocates memory before its timed burn,
# DCGM's level 3 runs about 15 minutes whatever the seconds say.
START_MARGIN_S = 60
DCGM_LEVEL_SECONDS = {2: 180, 3: 1200}
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


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
        return cls(node=node, remediation_id=remediation_id, backend=backend, seconds=seconds,
                   min_ratio=float(min_ratio), output_dir=output_dir, user=user, lab_dir=lab_dir,
                   dcgm_level=level, gpus=gpus)

    @property
    def name(self) -> str:
        return names(self.remediation_id)

    @property
    def tool(self) -> str:
        return "dcgm_diag" if self.backend == "dcgm_diag" else "gpu_burn"

    @property
    def output(self) -> str:
        return os.path.join(self.output_dir, self.name + ".out")

    @property
    def command(self) -> Tuple[str, ...]:
        if self.backend == "lab":
            return (os.path.join(str(self.lab_dir), "bin", "gpu_burn_sim"), "--state-dir",
                    os.path.join(str(self.lab_dir), "gpus", self.node), "--seconds", str(self.seconds))
        if self.backend == "dcgm_diag":
            return ("dcgmi", "diag", "-r", str(self.dcgm_level))
        return ("gpu_burn", "-d", "-m", "90%", str(self.seconds))

    @property
    def limit_s(self) -> int:
        """How long the job may take in all: Slurm's --time, and the module's wait."""
        run = DCGM_LEVEL_SECONDS[self.dcgm_level] if self.backend == "dcgm_diag" else self.seconds
        return run + START_MARGIN_S

    def batch_job(self, gpus: int) -> BatchJob:
        return BatchJob(name=self.name, node=self.node, command=self.command,
                        minutes=math.ceil(self.limit_s / 60.0), output=self.output, gpus=gpus,
                        reservation=self.name)


def judge(text: str, tool: str, min_ratio: float) -> Dict[str, Any]:
    """The burn's output -> ``passed``, ``verdict``, ``why`` (empty when it passed), ``slow`` GPUs and
    the parsed result's summary."""
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
