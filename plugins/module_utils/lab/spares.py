# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Bring a lab node online (a spare, or a node put back) and take one out of service.

A lab node is four parts, each set up by its own role for the active nodes. Each role also
writes, for every node of a pool (active and spare), how its part comes up:
``<lab>/recipes/<pool>/<NN>-<part>.json``, one file per pool and part, ``{"part", "pool",
<settings>, "nodes": {<node>: <entry>}}``:

=================  ==========  ===================================================================
file               role        entry
=================  ==========  ===================================================================
10-kube-node.json  node_pool   ``manifest``: the kwok Node; ``ready_timeout``
20-fake-gpus.json  node_pool   ``dir``, ``count``, ``product``: the fake-NVML state (fakegpu init)
30-slurmd.json     slurm       ``process`` (a lab_process spec), ``wait_for.tcp``; ``slurm_conf``,
                               ``bin_dir``
40-agent.json      health_     ``process``, ``wait_for.http`` (its /metrics), ``target.path`` and
                   agent       ``target.text`` (its Prometheus file_sd target)
=================  ==========  ===================================================================

``activate`` runs the parts in that order; ``retire`` undoes them in reverse. Every step looks
before it acts, so a run killed half-way and run again does nothing twice, and a node already as
wanted gives no action at all. Kubernetes and Slurm come in as the callers' clients (a
CoreV1Api and a ``slurm.client.SlurmClient``): this package is a layer beside them, not above.

Steps of ``activate(node)``:

1. the Kubernetes Node: created from its manifest (plus the given annotations) after a simulated
   boot delay; annotations added when it exists without them; waited for until Ready and
   without the not-ready taint;
2. the fake GPUs: created when missing, and set healthy unless the node is in service (its
   slurmd runs), so a rerun never wipes a fault injected since;
3. slurmd: started by lab_process spec, waited for until slurmctld shows the node registered;
4. the health agent: started and waited for on /metrics, then its scrape target published.

Steps of ``retire(node)``: scrape target removed; agent stopped; the Slurm node set FUTURE (hidden
again, as a spare is), then its slurmd stopped; the Kubernetes Node deleted. The fake GPU state
stays as it was, the evidence of the fault. A node with jobs still on it is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import POOL_LABEL
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state, process

RECIPES_DIR = "recipes"
# <lab>/replacements/<retired node>.json: {"retired", "replacement", "pool"}, one per replacement in
# force. node_replace writes it once the spare is in and the failed node out, and removes it on
# restore; one-click-slurm.yml reads them so that a rerun keeps the fleet as it was replaced.
REPLACEMENTS_DIR = "replacements"
# (file, part) in the order activate runs them.
PARTS = (
    ("10-kube-node.json", "kube-node"),
    ("20-fake-gpus.json", "fake-gpus"),
    ("30-slurmd.json", "slurmd"),
    ("40-agent.json", "agent"),
)
REPLACES_ANNOTATION = "gpufleet.io/replaces"
REMEDIATION_ID_ANNOTATION = "gpufleet.io/remediation-id"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
MERGE_PATCH = "application/merge-patch+json"
# Slurm has not (yet) taken the node's registration: the role's wait uses the same list.
UNREGISTERED_FLAGS = ("NOT_RESPONDING", "POWERED_DOWN", "POWERING_UP", "POWERING_DOWN", "INVALID_REG", "FAIL")


class LabNodeError(GpufleetError):
    """A lab node cannot be brought online or taken out: a recipe, a process or a wait failed."""


# ---------------------------------------------------------------- recipes


@dataclass(frozen=True)
class NodeRecipe:
    """Everything the roles recorded about one node: part name -> its settings and entry."""

    name: str
    pool: str
    spare: bool
    parts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def part(self, name: str) -> Optional[Mapping[str, Any]]:
        return self.parts.get(name)


def recipes_dir(lab_dir: str) -> str:
    return os.path.join(lab_dir, RECIPES_DIR)


def _load_part(path: str, pool: str, part: str) -> Mapping[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise LabNodeError("%s: unreadable recipe (%s); run the role that writes it again" % (path, exc)) from None
    if not isinstance(data, dict) or data.get("part") != part or data.get("pool") != pool \
            or not isinstance(data.get("nodes"), dict):
        raise LabNodeError("%s: not a %s recipe of pool %s (needs part, pool and nodes)" % (path, part, pool))
    return data


def load_recipes(lab_dir: str) -> Dict[str, NodeRecipe]:
    """Every node the recipes know, by name, pools in name order and nodes in layout order."""
    base = recipes_dir(lab_dir)
    try:
        pools = sorted(entry for entry in os.listdir(base) if os.path.isdir(os.path.join(base, entry)))
    except FileNotFoundError:
        return {}
    found: Dict[str, Dict[str, Any]] = {}
    for pool in pools:
        for filename, part in PARTS:
            path = os.path.join(base, pool, filename)
            if not os.path.exists(path):
                continue
            data = _load_part(path, pool, part)
            settings = {key: value for key, value in data.items() if key not in ("nodes", "part", "pool")}
            for name in sorted(data["nodes"]):
                entry = data["nodes"][name]
                if not isinstance(entry, dict):
                    raise LabNodeError("%s: nodes.%s must be an object" % (path, name))
                node = found.setdefault(name, {"pool": pool, "spare": bool(entry.get("spare")), "parts": {}})
                if node["pool"] != pool:
                    raise LabNodeError("%s: node %s is also in pool %s" % (path, name, node["pool"]))
                node["parts"][part] = dict(settings, **entry)
    return {name: NodeRecipe(name=name, pool=data["pool"], spare=data["spare"], parts=data["parts"])
            for name, data in found.items()}


def node_recipe(recipes: Mapping[str, NodeRecipe], name: str, field_name: str, lab_dir: str) -> NodeRecipe:
    """The recipe of ``name``; FieldError(field_name) when the lab has none."""
    recipe = recipes.get(name)
    if recipe is None:
        if not recipes:
            raise FieldError(field_name, "%r: the lab at %s has no node recipes (%s); bring the lab up with "
                             "one-click-slurm.yml first" % (name, lab_dir, recipes_dir(lab_dir)))
        raise FieldError(field_name, "%r is not a node of any pool of the lab (%s)"
                         % (name, ", ".join(sorted({r.pool for r in recipes.values()}))))
    missing = [part for _file, part in PARTS if part not in recipe.parts and part != "fake-gpus"]
    if missing:
        raise LabNodeError("node %s has no %s recipe under %s: run the roles again (one-click-slurm.yml)"
                           % (name, ", ".join(missing), os.path.join(recipes_dir(lab_dir), recipe.pool)))
    return recipe


def pick_spare(recipes: Mapping[str, NodeRecipe], failed: str, in_service: Callable[[str], bool],
               taken: Sequence[str] = ()) -> Optional[str]:
    """The first spare of ``failed``'s pool (layout order) that is not in service and not ``taken``.

    Pure given ``in_service``. Only nodes the layout calls spares qualify: a node retired by an
    earlier replacement is out for repair, not spare capacity.
    """
    pool = recipes[failed].pool
    for name, recipe in recipes.items():
        if recipe.pool == pool and recipe.spare and name != failed and name not in taken and not in_service(name):
            return name
    return None


# ---------------------------------------------------------------- the node's parts


def node_ready(node: Mapping[str, Any]) -> bool:
    """Ready=True and no not-ready taint (the scheduler places pods only then)."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") == NOT_READY_TAINT for t in taints)


def _spec(entry: Mapping[str, Any], node: str) -> process.ProcessSpec:
    spec = entry.get("process") or {}
    try:
        return process.ProcessSpec(name=spec["name"], argv=[str(word) for word in spec["argv"]],
                                   run_dir=spec["run_dir"], log_dir=spec["log_dir"],
                                   env={str(k): str(v) for k, v in (spec.get("env") or {}).items()},
                                   chdir=spec.get("chdir"), user=spec.get("user"))
    except (KeyError, TypeError) as exc:
        raise LabNodeError("node %s: the process recipe lacks %s" % (node, exc)) from None


def _alive(spec: process.ProcessSpec) -> bool:
    record = process.read_record(spec.run_dir, spec.name)
    return record is not None and process.is_alive(record)


def _status(exc: Exception) -> Optional[int]:
    return getattr(exc, "status", None)


class LabNodes:
    """The lab's nodes through the caller's clients.

    ``kube``: a CoreV1Api (read_node, list_node, create_node, patch_node, delete_node). ``slurm``: a
    SlurmClient (nodes, jobs, set_node_state). ``wait_timeout`` bounds each wait.
    """

    def __init__(self, lab_dir: str, kube: Any, slurm: Any, wait_timeout: float = 300.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 recipes: Optional[Mapping[str, NodeRecipe]] = None) -> None:
        self.lab_dir = lab_dir
        self.kube = kube
        self.slurm = slurm
        self.wait_timeout = float(wait_timeout)
        self.sleep = sleep
        self.clock = clock
        self.recipes = dict(recipes) if recipes is not None else load_recipes(lab_dir)

    def recipe(self, name: str, field_name: str = "name") -> NodeRecipe:
        return node_recipe(self.recipes, name, field_name, self.lab_dir)

    # -- reading ---------------------------------------------------------------------------
    def kube_node(self, name: str) -> Optional[Dict[str, Any]]:
        """The Node as a dict, or None when Kubernetes has none."""
        try:
            found = self.kube.read_node(name)
        except Exception as exc:  # ApiException (404 is an answer) or a connection error
            if _status(exc) == 404:
                return None
            raise LabNodeError("read Kubernetes node %s: %s" % (name, getattr(exc, "reason", None) or exc)) from exc
        return found if isinstance(found, dict) else self.kube.api_client.sanitize_for_serialization(found)

    def slurm_node(self, name: str) -> Any:
        """The SlurmNode (FUTURE included), without jobs."""
        return self.slurm.nodes(names=[name], future=True, with_jobs=False)[name]

    def slurmd_alive(self, name: str) -> bool:
        return _alive(_spec(self.recipe(name).parts["slurmd"], name))

    def in_service(self, name: str) -> bool:
        """It has a Kubernetes Node or a running slurmd: not spare capacity."""
        return self.kube_node(name) is not None or self.slurmd_alive(name)

    def replacement_of(self, failed: str) -> Optional[str]:
        """The node of ``failed``'s pool whose Kubernetes Node says it replaces ``failed`` (one list call)."""
        pool = self.recipe(failed).pool
        selector = "%s=%s" % (POOL_LABEL, pool)
        try:
            listed = self.kube.list_node(label_selector=selector)
        except Exception as exc:  # ApiException or a connection error
            raise LabNodeError("list Kubernetes nodes %s: %s" % (selector, getattr(exc, "reason", None) or exc)) \
                from exc
        for item in listed.items:
            node = item if isinstance(item, dict) else self.kube.api_client.sanitize_for_serialization(item)
            metadata = node.get("metadata") or {}
            name = metadata.get("name")
            if name != failed and name in self.recipes and self.recipes[name].pool == pool \
                    and (metadata.get("annotations") or {}).get(REPLACES_ANNOTATION) == failed:
                return name
        return None

    def active_jobs(self, name: str) -> List[Any]:
        return [job for job in self.slurm.jobs(nodes=[name]) if job.active]

    def check_no_jobs(self, name: str) -> None:
        """Refuse a node that still runs jobs; wait (up to wait_timeout) for jobs that are completing."""
        deadline = self.clock() + self.wait_timeout
        while True:
            jobs = self.active_jobs(name)
            if not jobs:
                return
            leaving = all(job.completing for job in jobs)
            if not leaving or self.clock() >= deadline:
                raise LabNodeError(
                    "node %s still has jobs %s: requeue or cancel them first (gpufleet.resilience.slurm_jobs)"
                    % (name, ", ".join("%s (%s)" % (job.job_id, "+".join([job.state, *job.flags]))
                                       for job in jobs)))
            self.sleep(1.0)

    # -- waiting ---------------------------------------------------------------------------
    def _wait(self, what: str, probe: Callable[[], Any]) -> Any:
        deadline = self.clock() + self.wait_timeout
        last = None
        while True:
            last = probe()
            if last:
                return last
            if self.clock() >= deadline:
                raise LabNodeError("timed out after %gs waiting for %s" % (self.wait_timeout, what))
            self.sleep(0.5)

    def _registered(self, name: str) -> bool:
        node = self.slurm_node(name)
        return node.state not in ("FUTURE", "UNKNOWN") and not set(node.flags) & set(UNREGISTERED_FLAGS)

    # -- activate --------------------------------------------------------------------------
    def activate(self, name: str, annotations: Optional[Mapping[str, str]] = None, boot_delay: float = 0.0,
                 check_mode: bool = False, field_name: str = "name", fence_reason: Optional[str] = None) -> List[str]:
        """Bring ``name`` online; the actions done (or, in check mode, to do); none when it is online.

        With ``fence_reason``, a node not yet in service is drained in Slurm with it first: Slurm keeps
        a FUTURE node's DRAIN when its slurmd registers (measured, 22.05), so it takes no job before
        the remediation's admit phase has validated it. Retiring it (FUTURE again) clears the drain."""
        recipe = self.recipe(name, field_name)
        actions: List[str] = []
        wanted = {key: value for key, value in (annotations or {}).items() if value is not None}
        self._activate_kube(recipe, wanted, boot_delay, check_mode, actions)
        in_service = self.slurmd_alive(name)
        self._activate_gpus(recipe, in_service, check_mode, actions)
        if fence_reason and not in_service:
            actions.append("drain Slurm node %s before it registers: %s" % (name, fence_reason))
            if not check_mode:
                self.slurm.set_node_state(name, "DRAIN", fence_reason)
        self._activate_slurmd(recipe, check_mode, actions)
        self._activate_agent(recipe, check_mode, actions)
        return actions

    def _activate_kube(self, recipe: NodeRecipe, annotations: Mapping[str, str], boot_delay: float,
                       check_mode: bool, actions: List[str]) -> None:
        name = recipe.name
        node = self.kube_node(name)
        if node is None:
            actions.append("boot %s (%gs simulated) and create its Kubernetes node" % (name, boot_delay)
                           if boot_delay else "create Kubernetes node %s" % name)
            if check_mode:
                return
            if boot_delay > 0:
                self.sleep(boot_delay)
            manifest = json.loads(json.dumps(recipe.parts["kube-node"]["manifest"]))
            manifest.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
            try:
                self.kube.create_node(manifest)
            except Exception as exc:
                if _status(exc) != 409:
                    raise LabNodeError("create Kubernetes node %s: %s"
                                       % (name, getattr(exc, "reason", None) or exc)) from exc
                # Created meanwhile by someone else: the annotations below say whose it is.
                actions.pop()
                node = self.kube_node(name)
        if node is not None:
            current = (node.get("metadata") or {}).get("annotations") or {}
            claimed = current.get(REPLACES_ANNOTATION)
            if REPLACES_ANNOTATION in annotations and claimed and claimed != annotations[REPLACES_ANNOTATION]:
                raise SpareTaken(name, claimed)
            missing = {key: value for key, value in annotations.items() if current.get(key) != value}
            if missing:
                actions.append("annotate Kubernetes node %s with %s" % (
                    name, ", ".join("%s=%s" % item for item in sorted(missing.items()))))
                if not check_mode:
                    try:
                        self.kube.patch_node(name, {"metadata": {"annotations": missing}}, _content_type=MERGE_PATCH)
                    except Exception as exc:
                        raise LabNodeError("annotate Kubernetes node %s: %s"
                                           % (name, getattr(exc, "reason", None) or exc)) from exc
        if not check_mode:
            self._wait("Kubernetes node %s to be Ready" % name, lambda: node_ready(self.kube_node(name) or {}))

    def _activate_gpus(self, recipe: NodeRecipe, in_service: bool, check_mode: bool, actions: List[str]) -> None:
        entry = recipe.part("fake-gpus")
        if entry is None or in_service:
            return
        state_dir = entry["dir"]
        try:
            current: Optional[Dict[str, Any]] = fake_gpu_state.read(state_dir)
        except (fake_gpu_state.FakeGpuStateError, OSError, ValueError):
            current = None
        if gpus_as_recorded(current, int(entry["count"]), entry["product"]):
            return
        actions.append("give %s %d healthy fake GPUs" % (recipe.name, int(entry["count"])))
        if check_mode:
            return
        try:
            fake_gpu_state.init(state_dir, int(entry["count"]), recipe.name, entry["product"])
            fake_gpu_state.clear(state_dir)
        except (fake_gpu_state.FakeGpuStateError, OSError) as exc:
            raise LabNodeError("fake GPUs of %s: %s" % (recipe.name, exc)) from exc

    def _activate_slurmd(self, recipe: NodeRecipe, check_mode: bool, actions: List[str]) -> None:
        entry = recipe.parts["slurmd"]
        self._start(recipe.name, entry, check_mode, actions)
        if not check_mode:
            self._wait("Slurm node %s to register with slurmctld" % recipe.name,
                       lambda: self._registered(recipe.name))

    def _activate_agent(self, recipe: NodeRecipe, check_mode: bool, actions: List[str]) -> None:
        entry = recipe.parts["agent"]
        self._start(recipe.name, entry, check_mode, actions)
        target = entry.get("target") or {}
        if target.get("path") and _read(target["path"]) != target.get("text", ""):
            actions.append("publish scrape target %s" % target["path"])
            if not check_mode:
                _write_atomic(target["path"], target.get("text", ""))

    def _start(self, node: str, entry: Mapping[str, Any], check_mode: bool, actions: List[str]) -> None:
        spec = _spec(entry, node)
        wait_for = dict(entry.get("wait_for") or {})
        check = process.ReadinessCheck(tcp=wait_for.get("tcp"), http=wait_for.get("http"), file=wait_for.get("file"),
                                       timeout=self.wait_timeout) if wait_for else None
        try:
            outcome = process.ensure_started(spec, check, check_mode)
        except process.LabProcessError as exc:
            raise LabNodeError(str(exc)) from exc
        if outcome.changed:
            actions.append("%s %s" % (outcome.action, spec.name))

    # -- retire ----------------------------------------------------------------------------
    def retire(self, name: str, check_mode: bool = False, field_name: str = "name") -> List[str]:
        """Take ``name`` out of service; the actions done (or to do); none when it is out already."""
        recipe = self.recipe(name, field_name)
        actions: List[str] = []
        agent = recipe.parts["agent"]
        target = (agent.get("target") or {}).get("path")
        if target and os.path.exists(target):
            actions.append("withdraw scrape target %s" % target)
            if not check_mode:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
        self._stop(name, agent, check_mode, actions)
        slurmd = recipe.parts["slurmd"]
        if self.slurm_node(name).state != "FUTURE":
            actions.append("set Slurm node %s FUTURE" % name)
            if not check_mode:
                self.slurm.set_node_state(name, "FUTURE")
        self._stop(name, slurmd, check_mode, actions)
        if self.kube_node(name) is not None:
            actions.append("delete Kubernetes node %s" % name)
            if not check_mode:
                try:
                    self.kube.delete_node(name)
                except Exception as exc:
                    if _status(exc) != 404:
                        raise LabNodeError("delete Kubernetes node %s: %s"
                                           % (name, getattr(exc, "reason", None) or exc)) from exc
                self._wait("Kubernetes node %s to be gone" % name, lambda: self.kube_node(name) is None)
        return actions

    def _stop(self, node: str, entry: Mapping[str, Any], check_mode: bool, actions: List[str]) -> None:
        spec = _spec(entry, node)
        try:
            outcome = process.ensure_stopped(spec.run_dir, [spec.name], check_mode)
        except process.LabProcessError as exc:
            raise LabNodeError(str(exc)) from exc
        if outcome.changed:
            actions.append("stop %s" % spec.name)


def replacement_record_path(lab_dir: str, retired: str) -> str:
    return os.path.join(lab_dir, REPLACEMENTS_DIR, retired + ".json")


def read_replacement_record(lab_dir: str, retired: str) -> Optional[Dict[str, Any]]:
    """The record of ``retired``'s replacement, or None (none, or unreadable: written again by the next run)."""
    try:
        with open(replacement_record_path(lab_dir, retired), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record_replacement(lab_dir: str, retired: str, replacement: str, pool: str, check_mode: bool = False) -> bool:
    """Note that ``replacement`` serves in place of ``retired``; True when the record changed."""
    wanted = {"retired": retired, "replacement": replacement, "pool": pool}
    if read_replacement_record(lab_dir, retired) == wanted:
        return False
    if not check_mode:
        _write_atomic(replacement_record_path(lab_dir, retired), json.dumps(wanted, sort_keys=True) + "\n")
    return True


def forget_replacement(lab_dir: str, retired: str, check_mode: bool = False) -> bool:
    """``retired`` is back in service: its record goes; True when there was one."""
    path = replacement_record_path(lab_dir, retired)
    if not os.path.exists(path):
        return False
    if not check_mode:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return True


class SpareTaken(LabNodeError):
    """The spare's Node was created meanwhile for another node (a concurrent replacement)."""

    def __init__(self, spare: str, replaces: str) -> None:
        super().__init__("spare %s already replaces %s" % (spare, replaces))
        self.spare = spare
        self.replaces = replaces


_HEALTHY = {f.name: f.default for f in dataclass_fields(fake_gpu_state.GpuState)
            if f.name in fake_gpu_state.HEALTH_FIELDS}


def gpus_as_recorded(state: Optional[Mapping[str, Any]], count: int, product: str) -> bool:
    """``state`` (fake_gpu_state.read) has ``count`` healthy GPUs of ``product`` and no pending event."""
    if not state or state["node"]["count"] != count or state["pending_events"]:
        return False
    return all(gpu["product"] == product and all(gpu[key] == value for key, value in _HEALTHY.items())
               for gpu in state["gpus"])


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _write_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
