# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The argument spec every chaos module shares (doc fragment gpufleet.resilience.chaos), and the
one way they report an error: fail_json naming the bad field, nothing done."""

from __future__ import annotations

from typing import Any, Callable, Dict

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    TransportError,
    api_failure,
    connection_argspec,
    kube_timeouts,
    unreachable,
)


def common_argspec(**extra: Any) -> Dict[str, Any]:
    spec = dict(
        **connection_argspec(),
        namespace=dict(type="str", default="gpufleet-system"),
        ledger_file=dict(type="path"),
        lab_dir=dict(type="path"),
        slurm_conf=dict(type="path"),
        slurm_bin_dir=dict(type="path"),
    )
    spec.update(extra)
    return spec


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
