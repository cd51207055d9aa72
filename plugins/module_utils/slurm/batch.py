# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A batch job the drills submit (a burn, a NUMA load, a neighbour that holds GPUs): one command on
one node, bounded in time, and how each transport says it.

* cli - ``sbatch --parsable -w <node> [--gres=gpu:<n>] --time=<min> --job-name=<name>
  --output=<file> --wrap '<command>'``; sbatch wraps the string in a small ``#!/bin/sh`` script.
* rest - ``POST .../job/submit`` with the same script written out (slurmrestd has no ``--wrap``),
  ``required_nodes``, ``tres_per_node: gres/gpu:<n>``, the time limit, the output file, and an
  environment of its own: sbatch exports the submitter's, a REST call has none to export.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int

# The options of sbatch that a BatchJob uses, in command-line order (runner.SLURM_COMMANDS has their formats).
SBATCH_OPTIONS = ("parsable", "nodelist", "gres", "time", "job_name", "output", "reservation", "wrap")
# What a job submitted through slurmrestd finds in its environment: enough to find the usual programs.
REST_ENVIRONMENT = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C")


@dataclass(frozen=True)
class BatchJob:
    """One command on one node; ``gpus`` None asks for no GPU in Slurm's books."""

    name: str
    node: str
    command: Tuple[str, ...]
    minutes: int
    output: str
    gpus: Optional[int] = None
    workdir: str = "/tmp"
    # A reservation the job runs in: a validation job on a node reserved for it (Flags=MAINT).
    reservation: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.command:
            raise FieldError("command", "a batch job needs a command")
        check_int(self.minutes, "minutes", 1, 525600)
        if self.gpus is not None:
            check_int(self.gpus, "gpus", 1, 1024)

    @property
    def script(self) -> str:
        """The batch script: the command, as sbatch --wrap writes it."""
        return "#!/bin/sh\n%s\n" % shlex.join(self.command)

    def sbatch_values(self) -> Dict[str, Any]:
        """The values of SBATCH_OPTIONS for the CLI."""
        return {"parsable": True, "nodelist": self.node, "time": str(self.minutes), "job_name": self.name,
                "gres": None if self.gpus is None else "gpu:%d" % self.gpus, "output": self.output,
                "reservation": self.reservation, "wrap": shlex.join(self.command)}

    def rest_body(self) -> Dict[str, Any]:
        """The body of slurmrestd's ``job/submit``."""
        job: Dict[str, Any] = {
            "name": self.name, "script": self.script, "required_nodes": [self.node],
            "time_limit": {"set": True, "infinite": False, "number": self.minutes},
            "standard_output": self.output, "current_working_directory": self.workdir,
            "environment": list(REST_ENVIRONMENT),
        }
        if self.gpus is not None:
            job["tres_per_node"] = "gres/gpu:%d" % self.gpus
        if self.reservation:
            job["reservation"] = self.reservation
        return {"job": job}
