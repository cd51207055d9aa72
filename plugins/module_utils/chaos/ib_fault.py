# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""InfiniBand port faults: a port down, a link that flaps.

One backend, ``ib_sim``: the lab node's fake sysfs (``<lab>/gpus/<node>/sys``, lab/fake_ib.py),
which the unmodified health agent reads as it reads ``/sys`` on a real node.

* ``ib_port_down`` - the port's state and physical state become ``DOWN``/``Disabled`` (the kernel's
  ``link_downed`` counter counts it, as on hardware). The undo keeps the states it found, so
  revert puts back exactly those.
* ``ib_link_flap`` - the port goes down and up ``times`` times at once (``link_downed`` rises by
  that many). Nothing stays changed: revert has nothing to put back, and the agent clears its
  finding after its recovery window (the drill's verify waits for that).

On a real node this version takes no port down: doing so (``ibportstate ... disable``, or the
switch's side) cuts the node off the fabric for every job and needs the subnet manager's
cooperation, and it is refused with a clear error rather than faked.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import int_param
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import read_port
from ansible_collections.gpufleet.resilience.plugins.module_utils.ib_sysfs import (
    ACTIVE,
    LINK_UP,
    PHYS_STATE_NAMES,
    STATE_NAMES,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state, fake_ib

BACKENDS = ("ib_sim",)
_HCA = re.compile(r"[A-Za-z0-9_]{1,64}")


def _params(spec: Mapping[str, Any]) -> Dict[str, Any]:
    params = dict(experiments.get(spec["experiment"]).params)
    params.update(spec.get("params") or {})
    hca = params.get("hca")
    if not isinstance(hca, str) or not _HCA.fullmatch(hca):
        raise FieldError("params.hca", "must be an HCA name such as mlx5_0, got %r" % (hca,))
    params["port"] = int_param(params, "port", 1, fake_ib.MAX_PORTS)
    if spec["experiment"] == "ib_link_flap":
        params["times"] = int_param(params, "times", 1, 1000)
    return params


def _backend(spec: Mapping[str, Any], lab: bool) -> str:
    chosen = spec.get("backend") or "default"
    if chosen not in ("default", "ib_sim"):
        raise FieldError("backend", "unknown InfiniBand fault backend %r; backends: %s" % (chosen, ", ".join(BACKENDS)))
    if not lab:
        raise FieldError("backend", "ib_sim writes the lab's fake sysfs; taking a real node's InfiniBand port down "
                                    "is not supported (it cuts the node off the fabric and needs the subnet manager)")
    return "ib_sim"


def _root(ctx: FaultContext, node: str) -> str:
    root = fake_gpu_state.ib_root(os.path.join(ctx.lab_dir or "", "gpus", node))
    if not os.path.isdir(os.path.join(root, "class", "infiniband")):
        raise FieldError("target", "%s has no simulated InfiniBand ports in %s" % (node, root))
    return root


def _port_state(root: str, hca: str, port: int) -> Dict[str, int]:
    """The port's state codes as the agent reads them (health.infiniband.read_port)."""
    base = os.path.join(root, "class", "infiniband", hca, "ports", str(port))
    if not os.path.isdir(base):
        raise FieldError("params.hca", "the node has no port %s/%d (see %s)" % (hca, port, os.path.dirname(base)))
    found = read_port(base, hca, port)
    if found.error:
        raise FieldError("params.hca", "port %s/%d cannot be read: %s" % (hca, port, found.error))
    return {"state": found.state_code, "phys_state": found.phys_state_code}


# -- the family interface ----------------------------------------------------------------------
def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    lab = bool(spec.get("lab_dir"))
    params = _params(spec)
    backend = _backend(spec, lab)
    where = "%s/%d" % (params["hca"], params["port"])
    if spec["experiment"] == "ib_port_down":
        actions = ["%s: InfiniBand port %s DOWN/Disabled (its link_downed counter +1)" % (spec["node"], where),
                   "%s: rollback: the port's states as they were" % spec["node"]]
    else:
        actions = ["%s: InfiniBand port %s down and up %d times (link_downed +%d); nothing to roll back"
                   % (spec["node"], where, params["times"], params["times"])]
    return {"actions": actions, "simulated": ["ib_sim: the HCA is the lab's fake sysfs, read by the agent"],
            "missing": [], "backends": [backend], "params": params, "resolved": {}}


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    params = _params(spec)
    _backend(spec, bool(ctx.lab_dir))
    root = _root(ctx, spec["node"])
    undo: Dict[str, Any] = {"backends": ["ib_sim"], "experiment": spec["experiment"], "params": params}
    if spec["experiment"] == "ib_port_down":
        undo["previous"] = _port_state(root, params["hca"], params["port"])
        fake_ib.set_port(root, params["hca"], params["port"], state="DOWN", phys_state="Disabled")
    else:
        undo["link_downed"] = fake_ib.flap(root, params["hca"], params["port"], times=params["times"])
    return undo


def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """``undo`` is the spec merged with what inject returned (only the spec after a crash mid-inject)."""
    reverted: List[str] = []
    if undo.get("experiment") != "ib_port_down" or not ctx.lab_dir:
        return {"reverted": reverted, "already": True}
    params = _params(undo)
    root = _root(ctx, undo["node"])
    # A crash before inject wrote its undo: the port back up, the only safe guess (the steady-state
    # check before the inject found the node healthy).
    previous = undo.get("previous") or {"state": ACTIVE, "phys_state": LINK_UP}
    state, phys = previous["state"], previous["phys_state"]
    if fake_ib.set_port(root, params["hca"], params["port"], state=state, phys_state=phys):
        reverted.append("%s: InfiniBand port %s/%d back to %s, %s" % (
            undo["node"], params["hca"], params["port"], STATE_NAMES.get(state, state),
            PHYS_STATE_NAMES.get(phys, phys)))
    return {"reverted": reverted, "already": not reverted}
