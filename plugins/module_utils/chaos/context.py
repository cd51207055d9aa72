# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What a fault's inject and revert are handed besides its spec: where and how to act.

A typed context, not a dict: a setting a module documents reaches every experiment or fails where it
is made. (When it was a dict, the drill modules' ``slurm_bin_dir`` reached the steady-state check but
not inject and revert, which then ran the Slurm commands from the PATH.) Made once per module run by
``from_params``; experiments read its fields, and ``context_slurm`` turns it into a Slurm client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import (
    SLURM_SETTINGS,
    drill_slurm,
    slurm_settings,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import kube_timeouts
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import AnySlurmClient

DEFAULT_NAMESPACE = "gpufleet-chaos"


@dataclass(frozen=True)
class FaultContext:
    check_mode: bool = False
    # The lab's directory: the experiments act on its fake GPUs, kernel logs and processes.
    lab_dir: Optional[str] = None
    # How Slurm is reached: slurm_api, the rest_* options, slurm_conf and slurm_bin_dir
    # (args.SLURM_SETTINGS); empty when no Slurm was named.
    slurm: Mapping[str, Any] = field(default_factory=dict)
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    kube_timeout: Any = None  # kube/timeouts.py, as the connection options give it
    namespace: str = DEFAULT_NAMESPACE  # where an experiment's own objects (a burn Pod) go
    # Seams for the unit tests: a Slurm run function and a CoreV1Api instead of the real ones.
    run: Any = None
    core_v1: Any = None

    def __post_init__(self) -> None:
        unknown = sorted(str(key) for key in self.slurm if key not in SLURM_SETTINGS)
        if unknown:
            raise FieldError("slurm", "a fault context takes %s, not %s"
                             % (", ".join(SLURM_SETTINGS), ", ".join(unknown)))

    @classmethod
    def of(cls, **fields: Any) -> "FaultContext":
        """A context from flat fields, the Slurm settings among them (``slurm_conf=...``), as a
        caller or a test writes them; an unknown field is refused by name."""
        slurm = {key: fields.pop(key) for key in list(fields) if key in SLURM_SETTINGS}
        known = set(cls.__dataclass_fields__)
        unknown = sorted(key for key in fields if key not in known)
        if unknown:
            raise FieldError(unknown[0], "is not a field of a fault context (%s, or a Slurm setting)"
                             % ", ".join(sorted(known)))
        return cls(slurm=slurm, **fields)


def from_params(params: Mapping[str, Any], check_mode: bool) -> FaultContext:
    """The context of a chaos module's run (its params: the chaos doc fragment's options)."""
    return FaultContext(check_mode=check_mode, lab_dir=params.get("lab_dir"), slurm=slurm_settings(params),
                        kubeconfig=params.get("kubeconfig"), context=params.get("context"),
                        kube_timeout=kube_timeouts(params),
                        namespace=params.get("chaos_namespace") or DEFAULT_NAMESPACE)


def context_slurm(ctx: FaultContext) -> AnySlurmClient:
    """The Slurm client of a fault's context: its Slurm settings, check mode and run function."""
    return drill_slurm(ctx.slurm, check_mode=ctx.check_mode, run=ctx.run)
