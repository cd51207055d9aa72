# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""One way for every module to reach Slurm: the options of the ``slurm_api`` doc fragment and the
client they make, the CLI client (client.py) or the REST one (rest.py), which answer the same calls."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient, check_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import (
    SlurmRestClient,
    TokenSource,
    stdlib_http,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import RunFunction, SlurmRunner

AnySlurmClient = Union[SlurmClient, SlurmRestClient]

# The argument spec of the doc fragment gpufleet.resilience.slurm_api.
SLURM_API_ARGS: Dict[str, Dict[str, Any]] = dict(
    slurm_api=dict(type="str", choices=["cli", "rest"], default="cli"),
    slurm_conf=dict(type="path"),
    bin_dir=dict(type="path"),
    timeout=dict(type="float", default=30),
    rest_url=dict(type="str"),
    rest_user=dict(type="str", default="root"),
    rest_jwt_key_file=dict(type="path", no_log=False),
    rest_token_file=dict(type="path", no_log=False),
    rest_token_lifespan=dict(type="int", default=600, no_log=False),
    rest_ca_file=dict(type="path"),
    rest_validate_certs=dict(type="bool", default=True),
    rest_allow_http=dict(type="bool", default=False),
    rest_requeue_exit=dict(type="list", elements="int"),
)


def slurm_api_args(timeout: float = 30) -> Dict[str, Dict[str, Any]]:
    """SLURM_API_ARGS with another default timeout (the fence's suboptions)."""
    return dict(SLURM_API_ARGS, timeout=dict(type="float", default=timeout))


def slurm_options(given: Optional[Mapping[str, Any]], field: str = "slurm") -> Optional[Dict[str, Any]]:
    """A dict option holding SLURM_API_ARGS' keys (a module's ``slurm``), checked by name; None stays None."""
    if given is None:
        return None
    stray = sorted(set(given) - set(SLURM_API_ARGS))
    if stray:
        raise FieldError("%s.%s" % (field, stray[0]), "is not a Slurm connection option (%s)" % ", ".join(
            sorted(SLURM_API_ARGS)))
    return {name: given[name] for name in given if given[name] is not None}


_REST_ONLY = ("rest_url", "rest_jwt_key_file", "rest_token_file", "rest_ca_file", "rest_requeue_exit",
              "rest_allow_http")
_CLI_ONLY = ("slurm_conf", "bin_dir")


def slurm_client(params: Mapping[str, Any], run: Optional[RunFunction] = None,
                 check_mode: bool = False) -> AnySlurmClient:
    """The client ``params`` (a module's, or the same keys) ask for; FieldError names a bad option.

    ``run`` runs the CLI's commands (a module's run_command; subprocess by default)."""
    api = params.get("slurm_api") or "cli"
    if api == "cli":
        stray = [name for name in _REST_ONLY if params.get(name)]
        if stray:
            raise FieldError(stray[0], "is for slurm_api=rest; slurm_api is cli")
        return SlurmClient(SlurmRunner(run=run, slurm_conf=params.get("slurm_conf"), timeout=params.get("timeout"),
                                       check_mode=check_mode, bin_dir=params.get("bin_dir")))
    if api != "rest":
        raise FieldError("slurm_api", "must be cli or rest, not %r" % api)
    stray = [name for name in _CLI_ONLY if params.get(name)]
    if stray:
        raise FieldError(stray[0], "is for slurm_api=cli; slurm_api is rest")
    if not params.get("rest_url"):
        raise FieldError("rest_url", "is required with slurm_api=rest")
    tokens = TokenSource(params.get("rest_user") or "root", jwt_key_file=params.get("rest_jwt_key_file"),
                         token_file=params.get("rest_token_file"), lifespan=params.get("rest_token_lifespan") or 600)
    http = stdlib_http(ca_file=params.get("rest_ca_file"), verify=params.get("rest_validate_certs", True) is not False)
    return SlurmRestClient(params["rest_url"], tokens, http=http, timeout=params.get("timeout"), check_mode=check_mode,
                           requeue_exit=params.get("rest_requeue_exit"), allow_http=bool(params.get("rest_allow_http")))


def node_info(client: AnySlurmClient, nodes: Optional[Sequence[str]] = None, future: bool = False) -> Dict[str, Any]:
    """What the slurm_node_info module returns: the nodes as dicts, and the Slurm version."""
    for index, node in enumerate(nodes or []):
        check_node(node, "nodes[%d]" % index)
    found = client.nodes(names=nodes, future=future)
    return dict(nodes=[node.as_dict() for node in found.values()], slurm_version=str(client.version()))
