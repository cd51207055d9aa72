# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The argument spec every chaos module shares (doc fragments gpufleet.resilience.chaos and
gpufleet.resilience.slurm_api.rest), the one Slurm client the drills make from it, and the one way
they report an error: fail_json naming the bad field, nothing done."""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    TransportError,
    api_failure,
    connection_argspec,
    kube_timeouts,
    unreachable,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import (
    SLURM_API_ARGS,
    AnySlurmClient,
    slurm_client,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import DEFAULT_TIMEOUT, RunFunction

# How a drill reaches Slurm: slurm_api and the rest_* options of the slurm_api doc fragment. The CLI's
# slurm_conf and bin_dir are the chaos fragment's slurm_conf and slurm_bin_dir.
SLURM_OPTIONS = ("slurm_api", *(name for name in SLURM_API_ARGS if name.startswith("rest_")))
# Every Slurm setting a chaos context carries (and the warden's --slurm-settings takes).
SLURM_SETTINGS = (*SLURM_OPTIONS, "slurm_conf", "slurm_bin_dir")


def common_argspec(**extra: Any) -> Dict[str, Any]:
    spec = dict(
        **connection_argspec(),
        namespace=dict(type="str", default="gpufleet-system"),
        ledger_file=dict(type="path"),
        lab_dir=dict(type="path"),
        slurm_conf=dict(type="path"),
        slurm_bin_dir=dict(type="path"),
        **{name: SLURM_API_ARGS[name] for name in SLURM_OPTIONS},
    )
    spec.update(extra)
    return spec


def slurm_settings(params: Mapping[str, Any]) -> Dict[str, Any]:
    """The Slurm options of a module's params, as a chaos context carries them."""
    settings = {name: params.get(name) for name in SLURM_SETTINGS}
    settings["slurm_api"] = settings["slurm_api"] or "cli"
    return settings


def drill_slurm(settings: Mapping[str, Any], check_mode: bool = False,
                run: Optional[RunFunction] = None) -> AnySlurmClient:
    """The Slurm client of ``settings`` (slurm_settings, or a module's params): the commands, or
    slurmrestd with slurm_api rest. FieldError names a bad option."""
    options = {name: settings.get(name) for name in SLURM_OPTIONS}
    options.update(slurm_conf=settings.get("slurm_conf"), bin_dir=settings.get("slurm_bin_dir"),
                   timeout=DEFAULT_TIMEOUT)
    return slurm_client(options, run=run, check_mode=check_mode)


def has_slurm(settings: Mapping[str, Any]) -> bool:
    """Whether a Slurm was named (a slurm.conf, or slurmrestd): steady state and probes read it then."""
    return bool(settings.get("slurm_conf") or settings.get("slurm_api") == "rest")


def run_module(module: Any, call: Callable[[], Dict[str, Any]]) -> None:
    try:
        try:
            kube_timeouts(module.params)  # refused before anything is done
            result = call()
        except ApiException as exc:  # a refusal the drill code did not expect: typed, never a traceback
            raise api_failure(exc, "Kubernetes API") from exc
        except TransportError as exc:
            raise unreachable(exc, "Kubernetes API") from exc
    except GpufleetError as exc:
        module.fail_json(msg=str(exc), field=getattr(exc, "field", None),
                         refusals=getattr(exc, "refusals", None))
    module.exit_json(**result)
