# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""InfiniBand port faults: a port down, a link that flaps.

Two backends:

* ``ib_sim`` (the lab's): the lab node's fake sysfs (``<lab>/gpus/<node>/sys``, lab/fake_ib.py),
  which the unmodified health agent reads as it reads ``/sys`` on a real node;
* ``ibportstate`` (a real node's, run on the node: the drill is delegated there): infiniband-diags'
  ``ibportstate -C <hca> -P <port> -D 0 <port> disable|enable``, a directed-route SMP to the
  node's own port, which its own SMA answers whether the link is up or not. Only an HCA that the
  node's root has opted in (a line of ``/etc/gpufleet/chaos-ib-hcas``) is touched: a port down cuts
  the node off the fabric for every job on it, so the opt-in is per HCA and on the node itself,
  beside the node's chaos opt-in label. A RoCE port (link layer Ethernet) is refused: SMPs do not
  reach it.

* ``ib_port_down`` - the port's state and physical state become ``DOWN``/``Disabled`` (the kernel's
  ``link_downed`` counter counts it, as on hardware). The undo keeps the states it found, so
  revert puts back exactly those.
* ``ib_link_flap`` - the port goes down and up ``times`` times at once (``link_downed`` rises by
  that many). Nothing stays changed: revert has nothing to put back, and the agent clears its
  finding after its recovery window (the drill's verify waits for that).

On a real node the rollback enables the port again (after a crash before the undo was written
too: the steady-state check found it up), and the subnet manager brings the link back to ACTIVE at
its next sweep. Not tested on hardware here: the lab has no HCA; the unit tests run the backend
against a sysfs tree and a command runner of our own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import int_param
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.infiniband import read_port
from ansible_collections.gpufleet.resilience.plugins.module_utils.ib_sysfs import (
    ACTIVE,
    LINK_UP,
    PHYS_STATE_NAMES,
    STATE_NAMES,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state, fake_ib

BACKENDS = ("ib_sim", "ibportstate")
# A real node's: where its ports are, which HCAs its root opted in, and the command.
SYSFS_ROOT = "/"
OPT_IN_FILE = "/etc/gpufleet/chaos-ib-hcas"
IBPORTSTATE = "ibportstate"
COMMAND_TIMEOUT = 30
FLAP_PAUSE_S = 2.0  # between a real port's disable and enable: long enough for the peer to see it go
MAX_REAL_FLAPS = 10
_HCA = re.compile(r"[A-Za-z0-9_]{1,64}")


def _params(spec: Mapping[str, Any]) -> Dict[str, Any]:
    params = dict(experiments.get(spec["experiment"]).params)
    params.update(spec.get("params") or {})
    hca = params.get("hca")
    if not isinstance(hca, str) or not _HCA.fullmatch(hca):
        raise FieldError("params.hca", "must be an HCA name such as mlx5_0, got %r" % (hca,))
    params["port"] = int_param(params, "port", 1, fake_ib.MAX_PORTS)
    if spec["experiment"] == "ib_link_flap":
        params["times"] = int_param(params, "times", 1, 1000 if spec.get("lab_dir") else MAX_REAL_FLAPS)
    return params


def _backend(spec: Mapping[str, Any], lab: bool) -> str:
    chosen = spec.get("backend") or "default"
    if chosen not in ("default", *BACKENDS):
        raise FieldError("backend", "unknown InfiniBand fault backend %r; backends: %s" % (chosen, ", ".join(BACKENDS)))
    if chosen == "default":
        return "ib_sim" if lab else "ibportstate"
    if chosen == "ib_sim" and not lab:
        raise FieldError("backend", "ib_sim writes the lab's fake sysfs; a real node's port is ibportstate's, with "
                                    "the HCA opted in on the node (%s)" % OPT_IN_FILE)
    if chosen == "ibportstate" and lab:
        raise FieldError("backend", "ibportstate acts on a real HCA; the lab's ports are ib_sim's")
    return chosen


def opted_in(path: str = "") -> List[str]:
    """The HCAs the node's root listed in the opt-in file, one per line (``#`` comments); none when
    the file is missing."""
    try:
        with open(path or OPT_IN_FILE, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def _real_port(params: Mapping[str, Any]) -> Dict[str, int]:
    """A real node's port, checked before anything is done: opted in, there, InfiniBand."""
    hca, port = params["hca"], params["port"]
    if hca not in opted_in():
        raise FieldError("params.hca", "%s has not opted in to InfiniBand drills on this node: its root lists it in "
                                       "%s (one HCA per line). A port down cuts the node off the fabric for every "
                                       "job on it" % (hca, OPT_IN_FILE))
    root = os.path.join(SYSFS_ROOT, "sys")
    base = os.path.join(root, "class", "infiniband", hca, "ports", str(port))
    try:
        with open(os.path.join(base, "link_layer"), encoding="ascii") as handle:
            layer = handle.read().strip()
    except OSError:
        layer = "InfiniBand"  # older kernels write no link_layer: InfiniBand
    if layer != "InfiniBand":
        raise FieldError("params.hca", "%s/%d is a %s (RoCE) port: ibportstate's SMPs do not reach it" % (
            hca, port, layer))
    return _port_state(root, hca, port)


def run_command(argv: Sequence[str]) -> str:
    """One command, argv as data (no shell); a failure names it and what it printed."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpufleetError("%s: %s" % (" ".join(argv), exc)) from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-300:]
        raise GpufleetError("%s failed (%d): %s" % (" ".join(argv), done.returncode, said))
    return done.stdout


def _ibportstate(params: Mapping[str, Any], op: str) -> List[str]:
    """The node's own port through a directed route of length 0 (the local SMA)."""
    port = str(params["port"])
    return [IBPORTSTATE, "-C", params["hca"], "-P", port, "-D", "0", port, op]


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
    if backend == "ibportstate":
        return _real_plan(spec, params, where)
    if spec["experiment"] == "ib_port_down":
        actions = ["%s: InfiniBand port %s DOWN/Disabled (its link_downed counter +1)" % (spec["node"], where),
                   "%s: rollback: the port's states as they were" % spec["node"]]
    else:
        actions = ["%s: InfiniBand port %s down and up %d times (link_downed +%d); nothing to roll back"
                   % (spec["node"], where, params["times"], params["times"])]
    return {"actions": actions, "simulated": ["ib_sim: the HCA is the lab's fake sysfs, read by the agent"],
            "missing": [], "backends": [backend], "params": params, "resolved": {}}


def _real_plan(spec: Mapping[str, Any], params: Mapping[str, Any], where: str) -> Dict[str, Any]:
    node = spec["node"]
    if spec["experiment"] == "ib_port_down":
        actions = ["%s: %s (the port DOWN/Disabled)" % (node, " ".join(_ibportstate(params, "disable"))),
                   "%s: rollback: %s" % (node, " ".join(_ibportstate(params, "enable")))]
    else:
        actions = ["%s: port %s disabled and enabled %d times, %gs apart (link_downed +%d)"
                   % (node, where, params["times"], FLAP_PAUSE_S, params["times"])]
    # Checked on the node, where the fault runs (not here: the plan is made on the controller).
    actions.append("%s: needs ibportstate (infiniband-diags) there and %s listed in its %s"
                   % (node, params["hca"], OPT_IN_FILE))
    return {"actions": actions, "simulated": [], "missing": [], "backends": ["ibportstate"], "params": params,
            "resolved": {}}


def _inject_real(spec: Mapping[str, Any], params: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    undo: Dict[str, Any] = {"backends": ["ibportstate"], "experiment": spec["experiment"], "params": dict(params)}
    previous = _real_port(params)
    if not shutil.which(IBPORTSTATE):
        raise GpufleetError("%s is not on this node's PATH (infiniband-diags): nothing was done" % IBPORTSTATE)
    if ctx.check_mode:
        return undo
    if spec["experiment"] == "ib_port_down":
        undo["previous"] = previous
        run_command(_ibportstate(params, "disable"))
        return undo
    for flap in range(params["times"]):
        run_command(_ibportstate(params, "disable"))
        time.sleep(FLAP_PAUSE_S)
        run_command(_ibportstate(params, "enable"))
        if flap + 1 < params["times"]:
            time.sleep(FLAP_PAUSE_S)
    undo["link_downed"] = params["times"]
    return undo


def _revert_real(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Enable the port when the drill left it disabled: a port down's rollback, or a flap cut short
    between its disable and its enable. A port found disabled before the drill stays so."""
    params = _params(undo)
    previous: Optional[Mapping[str, int]] = undo.get("previous")
    if previous is not None and previous.get("phys_state") != LINK_UP:
        return {"reverted": [], "already": True}
    now = _port_state(os.path.join(SYSFS_ROOT, "sys"), params["hca"], params["port"])
    if now["phys_state"] == LINK_UP or ctx.check_mode:
        return {"reverted": [], "already": True}
    run_command(_ibportstate(params, "enable"))
    return {"reverted": ["%s: %s (the subnet manager brings the link to ACTIVE at its next sweep)"
                         % (undo["node"], " ".join(_ibportstate(params, "enable")))], "already": False}


def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    params = _params(spec)
    if _backend(spec, bool(ctx.lab_dir)) == "ibportstate":
        return _inject_real(spec, params, ctx)
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
    if not ctx.lab_dir and (undo.get("backends") or ["ibportstate"]) == ["ibportstate"]:
        return _revert_real(undo, ctx)
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
