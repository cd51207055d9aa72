# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Replace a failed node from spare capacity, through one of three providers (node_replace).

* ``lab``: a spare of the lab's pool comes online and the node goes out (``lab.spares``);
* ``clusterapi``: the node's Machine is deleted and a new Ready Node awaited (``kube.clusterapi``);
* ``command``: the site's own command runs with the node's name (``replace.command``).

Every input is checked before anything acts; a bad one is a FieldError naming the option.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_name,
    check_node_name,
    check_number,
    optional_text,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    Connection,
    core_v1,
    kube_timeouts,
    unreachable,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.clusterapi import ClusterApiNodes
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.spares import LabNodes, load_recipes
from ansible_collections.gpufleet.resilience.plugins.module_utils.replace import lab as lab_provider
from ansible_collections.gpufleet.resilience.plugins.module_utils.replace.command import (
    RunFunction,
    run_replace_command,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

try:
    # The kubernetes client raises urllib3's errors when the API server cannot be reached at all.
    from urllib3.exceptions import HTTPError as TransportError
except ImportError:  # pragma: no cover - urllib3 comes with kubernetes
    TransportError = OSError  # type: ignore[assignment,misc]

PROVIDERS = ("lab", "clusterapi", "command")
STATES = ("replaced", "restored", "retired")


@dataclass(frozen=True)
class ReplaceRequest:
    name: str
    provider: str
    state: str = "replaced"
    spare: Optional[str] = None
    boot_delay: float = 0.0
    remediation_id: Optional[str] = None
    lab_dir: Optional[str] = None
    slurm_conf: Optional[str] = None
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    host: Optional[str] = None
    api_key: Optional[str] = field(default=None, repr=False)
    ca_cert: Optional[str] = None
    validate_certs: Optional[bool] = None
    wait_timeout: float = 300.0
    clusterapi_namespace: Optional[str] = None
    command: Optional[List[str]] = None
    command_timeout: float = 600.0
    kube_connect_timeout: Optional[float] = None
    kube_read_timeout: Optional[float] = None
    # Provider lab: the spare is drained in Slurm with this reason before its slurmd registers, so it
    # takes no work until the admit phase has validated it.
    fence_reason: Optional[str] = None


@dataclass
class ReplaceResult:
    changed: bool
    provider: str
    state: str
    replacement: Optional[str] = None
    retired: Optional[str] = None
    actions: List[str] = field(default_factory=list)
    machine: Optional[str] = None
    command: Dict[str, Any] = field(default_factory=dict)
    diff: Optional[Dict[str, Any]] = None

    def as_dict(self) -> Dict[str, Any]:
        result = dict(changed=self.changed, provider=self.provider, state=self.state, replacement=self.replacement,
                      retired=self.retired, actions=list(self.actions), machine=self.machine)
        result.update(self.command)
        return result


def check_request(request: ReplaceRequest) -> None:
    """Every rule across the options (pure); FieldError names the first one broken."""
    if request.provider not in PROVIDERS:
        raise FieldError("provider", "must be one of %s, not %r" % (", ".join(PROVIDERS), request.provider))
    if request.state not in STATES:
        raise FieldError("state", "must be one of %s, not %r" % (", ".join(STATES), request.state))
    check_node_name(request.name, "name")
    if request.spare is not None:
        check_node_name(request.spare, "spare")
    if request.remediation_id is not None:
        check_name(request.remediation_id, "remediation_id")  # an annotation value people grep for
    check_number(request.wait_timeout, "wait_timeout", above=0)
    check_number(request.command_timeout, "command_timeout", above=0)
    check_number(request.boot_delay, "boot_delay", minimum=0)
    kube_timeouts(vars(request))
    for option in ("lab_dir", "slurm_conf", "kubeconfig", "context", "host", "ca_cert", "clusterapi_namespace",
                   "fence_reason"):
        optional_text(getattr(request, option), option)
    if request.provider != "lab":
        if request.state == "restored":
            raise FieldError("state", "restored is for provider lab only: provider %s cannot bring a replaced "
                             "machine back" % request.provider)
        if request.state == "retired":
            raise FieldError("state", "retired is for provider lab only: on a cluster, a pool shrinks by its "
                             "provider (a smaller node group or MachineDeployment)")
        if request.spare is not None:
            raise FieldError("spare", "is for provider lab only; provider %s finds its own capacity" % request.provider)
    if request.state == "retired" and request.spare is not None:
        raise FieldError("spare", "is not used with state retired: nothing comes in the node's place")
    if request.provider == "lab" and not request.lab_dir:
        raise FieldError("lab_dir", "is required with provider lab")

    if request.provider == "command" and not request.command:
        raise FieldError("command", "is required with provider command")
    if request.provider != "command" and request.command:
        raise FieldError("command", "is for provider command only")


def replace_node(request: ReplaceRequest, run: RunFunction, check_mode: bool = False) -> ReplaceResult:
    """Check the request, then run its provider. ``run`` runs commands (Slurm's, the site's)."""
    check_request(request)
    try:
        if request.provider == "lab":
            return _lab(request, run, check_mode)
        if request.provider == "clusterapi":
            return _clusterapi(request, check_mode)
        return _command(request, run, check_mode)
    except TransportError as exc:
        raise unreachable(exc, "replace %s" % request.name) from exc


def _lab(request: ReplaceRequest, run: RunFunction, check_mode: bool) -> ReplaceResult:
    lab_dir = request.lab_dir or ""
    if not os.path.isdir(lab_dir):
        raise FieldError("lab_dir", "%s is not a directory (the lab's, gpufleet_lab_dir)" % lab_dir)
    recipes = load_recipes(lab_dir)
    if not recipes:
        raise FieldError("lab_dir", "%s has no node recipes (%s/recipes/<pool>/*.json): bring the lab up with "
                         "playbooks/one-click-slurm.yml first" % (lab_dir, lab_dir))
    slurmd = next((r.parts["slurmd"] for r in recipes.values() if "slurmd" in r.parts), {})
    slurm = SlurmClient(SlurmRunner(run=run, slurm_conf=request.slurm_conf or slurmd.get("slurm_conf"),
                                    bin_dir=slurmd.get("bin_dir"), check_mode=check_mode))
    connection = Connection.of(vars(request))
    if not (connection.kubeconfig or connection.host):  # the lab's own API server
        connection = replace(connection, kubeconfig=os.path.join(lab_dir, "kube", "admin.kubeconfig"))
    kube = core_v1(timeout=kube_timeouts(vars(request)), connection=connection)
    nodes = LabNodes(lab_dir, kube, slurm, wait_timeout=request.wait_timeout, recipes=recipes)
    if request.state == "restored":
        outcome = lab_provider.restore(nodes, request.name, request.spare, check_mode)
    elif request.state == "retired":
        outcome = lab_provider.retire(nodes, request.name, check_mode)
    else:
        outcome = lab_provider.replace(nodes, request.name, request.spare, request.remediation_id,
                                       request.boot_delay, check_mode, fence_reason=request.fence_reason)
    return ReplaceResult(changed=outcome.changed, provider="lab", state=request.state,
                         replacement=outcome.replacement, retired=outcome.retired, actions=outcome.actions,
                         diff={"before": outcome.before, "after": outcome.after if outcome.changed else outcome.before})


def _clusterapi(request: ReplaceRequest, check_mode: bool) -> ReplaceResult:
    api = ClusterApiNodes.connect(Connection.of(vars(request)), timeout=kube_timeouts(vars(request)),
                                  wait_timeout=request.wait_timeout,
                                  namespace=request.clusterapi_namespace)
    outcome = api.replace(request.name, request.remediation_id, check_mode)
    return ReplaceResult(changed=outcome.changed, provider="clusterapi", state=request.state,
                         replacement=outcome.replacement, retired=request.name, actions=outcome.actions,
                         machine=outcome.machine)


def _command(request: ReplaceRequest, run: RunFunction, check_mode: bool) -> ReplaceResult:
    outcome = run_replace_command(run, request.command, request.name, request.remediation_id,
                                  request.command_timeout, check_mode)
    return ReplaceResult(changed=outcome.changed, provider="command", state=request.state, replacement=None,
                         retired=request.name, actions=outcome.actions,
                         command=dict(cmd=outcome.argv, rc=outcome.rc, stdout=outcome.stdout, stderr=outcome.stderr))
