# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The calls the chaos modules make: each module's ``main`` is argument parsing plus one of these.

A drill's order (roles/chaos_drill): gate -> steady -> inject (+ the expiry watchdog) -> observe ->
rollback (always) -> verify -> report. The ledger is written before each injection and after each
rollback, so ``playbooks/chaos-stop.yml`` or the watchdog can finish what a killed controller left.
"""

from __future__ import annotations

import getpass
import json
import os
import secrets
import socket
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import (
    brakes,
    experiments,
    gate,
    ledger,
    observe,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.args import (
    drill_slurm,
    has_slurm,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext, from_params
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import check_target
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import (
    check_file_path,
    check_node_name,
    check_node_names,
    check_number,
    check_path,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import remediation_objects
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    Connection,
    core_v1,
    in_cluster,
    kube_timeouts,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.configmap_store import ConfigMapStore
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_job_ids
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import AnySlurmClient

POOL_LABEL = "gpufleet.io/pool"
# DCGM's injected values expire; the watchdog injects them again this often while a fault is active.
REINJECT_EVERY_S = 30.0
# The watchdog's next look after one that failed (watch_expiry).
WATCH_RETRY_S = 2.0
# How long a drill has from its gate to its first injection (steady state, baseline, the watchdog's
# start), beyond its duration: until then its watchdog and the warden leave it registered.
INJECT_WITHIN_S = 120.0


# -- families ----------------------------------------------------------------------------------
def family_module(name: str) -> Any:
    """The module of the family ``name`` (plan, inject, revert), imported now; None for a name no
    family has.

    A family is imported when a drill uses it. Each chaos module run compiles what it imports from
    the AnsiballZ zip, which holds no bytecode: the eight families and what they pull in (the XID
    catalog, the lab's process and GPU-reset code) cost about 0.1 s of CPU per run, and most runs
    (the gate, the ledger, the checks) need none. The imports are static, one per family, because
    Ansible's module packer finds imports inside functions (never importlib's): every family still
    travels with the module."""
    if name == "gpu_fault":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import gpu_fault as family
    elif name == "burn":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import burn as family
    elif name == "checkpoint":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import checkpoint as family
    elif name == "nccl_env":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import nccl_env as family
    elif name == "network":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import network as family
    elif name == "numa":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import numa as family
    elif name == "ib_fault":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import ib_fault as family
    elif name == "job_hang":
        from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import job_hang as family
    else:
        return None
    return family


class DrillRefused(GpufleetError):
    def __init__(self, refusals: List[Dict[str, str]]) -> None:
        super().__init__("drill refused, nothing was injected: " + "; ".join(
            "%s: %s" % (r["field"], r["why"]) for r in refusals))
        self.field = refusals[0]["field"]
        self.refusals = refusals


# -- clients -----------------------------------------------------------------------------------
def _kube(params: Mapping[str, Any]) -> Any:
    connection = Connection.of(params)
    # Bare metal: no Kubernetes named (a shell's KUBECONFIG alone does not count), the inventory opts nodes in.
    if not (connection.kubeconfig or connection.context or connection.host) and not in_cluster():
        return None
    return core_v1(timeout=kube_timeouts(params), connection=connection)


def _slurm(params: Mapping[str, Any]) -> Optional[AnySlurmClient]:
    """The Slurm that steady state and the probes read; None when no Slurm is named."""
    return drill_slurm(params) if has_slurm(params) else None


def ledger_store(params: Mapping[str, Any], kube: Any = None) -> Any:
    if params.get("ledger_file"):
        return ledger.FileStore(check_file_path(params["ledger_file"], "ledger_file"))
    kube = kube if kube is not None else _kube(params)
    if kube is None:
        raise FieldError("ledger_file", "without Kubernetes the chaos ledger needs a state file on the control host")
    return ConfigMapStore(kube, params.get("namespace") or "gpufleet-system", ledger.LEDGER_NAME)


def _read(store: Any) -> ledger.Data:
    data, _version = store.read()
    return data


def update_if(store: Any, change: Callable[[ledger.Data], Optional[ledger.Data]]) -> bool:
    """One compare-and-swap write of ``change``, whose None means "nothing to write" (decided on the
    data it would replace); True when it wrote."""
    def write(data: ledger.Data) -> Tuple[Optional[ledger.Data], bool]:
        new = change(data)
        return new, new is not None

    return bool(store.update(write))


def _holder() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return "%s@%s pid %d" % (user, socket.gethostname(), os.getpid())


# -- where a fault runs (docs/chaos.md "Where a fault runs") ---------------------------------------
def this_host() -> str:
    """The name the ledger records for the host a fault was injected on."""
    return socket.gethostname()


def _names_of_this_host() -> List[str]:
    names = {socket.gethostname(), socket.getfqdn()}
    names |= {name.split(".")[0] for name in names}
    return sorted(n for n in names if n)


def _is_this_host(name: Any, node_name: Optional[str] = None) -> bool:
    if not isinstance(name, str) or not name:
        return False
    if node_name:  # the site's own word for which node this host is (chaos_drill_node_name)
        return name == node_name
    names = _names_of_this_host()
    return name in names or name.split(".")[0] in names


def check_on_target(experiment: Any, spec: Mapping[str, Any], node_name: Optional[str] = None) -> None:
    """A fault that changes the node's own host is injected only on that host: on a real site a
    drill whose module runs on the controller (or any other host) would change a host that never
    opted in, while the gate checked the target's label. The lab's nodes all live on one machine,
    under the lab directory: there the fault runs where the lab is."""
    if spec.get("lab_dir") or not experiments.acts_on_host(experiment, spec.get("params") or {}):
        return
    if _is_this_host(spec["node"], node_name):
        return
    here = ("node_name %s" % node_name) if node_name else "host %s" % " / ".join(_names_of_this_host())
    raise FieldError("target", "%s acts on the node's own host, and this module runs on %s, not on %s: run it "
                     "there (the role delegates it to chaos_drill_fault_host; chaos_drill_node_name names the "
                     "node a host is); nothing was injected" % (experiment.name, here, spec["node"]))


def revert_here(entry: Mapping[str, Any]) -> bool:
    """Whether this host may revert a ledger entry: a fault that acted on a host is reverted on the
    host recorded at injection (its files, qdiscs and processes are there); an API fault, a lab
    fault or an entry from before hosts were recorded anywhere."""
    spec = entry.get("spec") or {}
    if spec.get("lab_dir") or not entry.get("on_host") or not entry.get("host"):
        return True
    return _is_this_host(entry["host"])


def check_drill(drill: Any, *keys: str) -> Mapping[str, Any]:
    """The drill a module was handed (chaos_gate's RV(drill)); one that lacks what is needed fails
    naming it, instead of a KeyError."""
    if not isinstance(drill, Mapping):
        raise FieldError("drill", "must be the drill chaos_gate returned, got %s" % type(drill).__name__)
    missing = [key for key in keys if key not in drill]
    if missing:
        raise FieldError("drill", "is not a drill chaos_gate returned: it has no %s" % ", ".join(missing))
    if not isinstance(drill.get("targets", []), list):
        raise FieldError("drill.targets", "must be a list of node names")
    return drill


# -- targets -----------------------------------------------------------------------------------
def resolve_targets(kube: Any, target: Any, allowed_nodes: List[str]) -> List[Dict[str, Any]]:
    """A node name, a comma list, or a label selector (``key=value``) -> [{"name", "labels", "pool"}]."""
    text = check_target(",".join(map(str, target)) if isinstance(target, list) else target)
    if kube is None:
        names = [n.strip() for n in text.split(",") if n.strip()]
        if "=" in text:
            raise FieldError("target", "a label selector needs Kubernetes; list the nodes by name")
        return [{"name": n, "labels": {}, "pool": ""} for n in names]
    if "=" in text:
        listed = kube.list_node(label_selector=text).items
    else:
        wanted = [n.strip() for n in text.split(",") if n.strip()]
        listed = [n for n in kube.list_node().items if n.metadata.name in wanted]
        missing = sorted(set(wanted) - {n.metadata.name for n in listed})
        if missing:
            raise FieldError("target", "no such node: %s" % ", ".join(missing))
    return [{"name": n.metadata.name, "labels": dict(n.metadata.labels or {}),
             "pool": (n.metadata.labels or {}).get(POOL_LABEL, "")} for n in listed]


def _pools(kube: Any) -> Dict[str, str]:
    """GPU node name -> its pool."""
    if kube is None:
        return {}
    return {node.metadata.name: node.metadata.labels[POOL_LABEL]
            for node in kube.list_node(label_selector=POOL_LABEL).items}


def _pool_sizes(pools: Mapping[str, str]) -> Dict[str, int]:
    sizes: Dict[str, int] = {}
    for pool in pools.values():
        sizes[pool] = sizes.get(pool, 0) + 1
    return sizes


def _spec(drill: Mapping[str, Any], node: str, fault_id: str, lab_dir: Optional[str]) -> Dict[str, Any]:
    return {"experiment": drill["experiment"], "node": node, "backend": drill.get("backend") or "default",
            "params": dict(drill.get("params") or {}), "fault_id": fault_id, "lab_dir": lab_dir}


# -- the gate ----------------------------------------------------------------------------------
def _remediations_under_way(kube: Any, params: Mapping[str, Any]) -> List[str]:
    """The remediations whose progress ConfigMap says they have not finished (a failed one has not:
    the remediation resumes it)."""
    if kube is None:
        return []
    namespace = params.get("namespace") or "gpufleet-system"
    found = []
    for item in kube.list_namespaced_config_map(namespace).items:
        node = remediation_objects.progress_node(item.metadata.name)
        raw = (item.data or {}).get(remediation_objects.PROGRESS_KEY)
        if not node or not raw:
            continue
        progress = json.loads(raw)
        if not remediation_objects.finished(progress):
            found.append("remediation %s of %s is under way" % (progress.get("id"), progress.get("node") or node))
    return found


def drill_gate(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None) -> Dict[str, Any]:
    now = time.time() if now is None else now
    experiment = experiments.get(params.get("experiment"))
    allowed_dirs = [check_path(d, "allowed_dirs[%d]" % i) for i, d in enumerate(params.get("allowed_dirs") or [])]
    if params.get("lab_dir"):
        allowed_dirs.append(os.path.normpath(params["lab_dir"]))  # the lab's own files
    merged = dict(experiment.params)
    merged.update(experiments.check_params(experiment, params.get("params"), allowed_dirs))
    # The job a checkpoint kill kills, or a job hang stops, is the one the drill protects.
    if experiment.name in ("checkpoint_kill", "job_hang"):
        for knob, option in (("job_id", "protected_job"), ("output", "protected_output")):
            if knob in experiment.knobs and params.get(option) and not merged.get(knob):
                merged[knob] = params[option]
    rails = gate.Rails.from_dict(params.get("blast_radius"), params.get("max_duration"))
    deadlines = experiments.deadlines(params.get("deadlines"))
    allowed = check_node_names(list(params.get("allowed_nodes") or []), "allowed_nodes")
    kube = _kube(params)
    targets = resolve_targets(kube, params.get("target"), allowed)
    if experiment.breaker and len(targets) < 2:
        raise FieldError("target", "%s is a storm: it needs more targets than the remediation's breaker lets "
                                   "through (at least two), got %d" % (experiment.name, len(targets)))
    store = ledger_store(params, kube)
    pools = _pools(kube)

    remediating = _remediations_under_way(kube, params) if params.get("exclusive") else []

    def refusals_in(data: ledger.Data) -> List[Dict[str, str]]:
        held = sorted({name for drill in ledger.drills(data).values() for name in drill.get("targets") or []})
        not_alone = []
        if params.get("exclusive"):
            not_alone = ["drill %s is active (%s on %s)" % (drill_id, drill.get("experiment"),
                                                            ",".join(drill.get("targets") or []))
                         for drill_id, drill in sorted(ledger.drills(data).items())] + remediating
        return gate.refusals(targets, _pool_sizes(pools), rails, params.get("duration"), allowed,
                             ledger.kill_switch(data), ledger.active_on(data, [t["name"] for t in targets]),
                             [{"name": name, "pool": pools.get(name, "")} for name in held], not_alone)

    # The brakes, checked before anything: a bad one found during the observation would come too late.
    abort_conditions = [brake.as_dict() for brake in brakes.check_brakes(params.get("abort_conditions"))]
    refusals = refusals_in(_read(store))
    if refusals:
        raise DrillRefused(refusals)
    drill_id = "d-%s-%s" % (time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)), secrets.token_hex(2))
    family = family_module(experiment.family)
    plans = []
    for node in targets:
        spec = _spec({"experiment": experiment.name, "params": merged, "backend": params.get("backend")},
                     node["name"], "f-%s-%s" % (drill_id[2:], node["name"]), params.get("lab_dir"))
        plans.append(dict(family.plan(spec), node=node["name"]))
    # What the plan resolved (gpu_xid's catalog severity) decides the loop's expectations.
    resolved = dict(merged)
    for item in plans:
        resolved.update(item.get("resolved") or {})
    simulated = list(experiment.simulated) if params.get("lab_dir") else []
    for item in plans:
        simulated += [s for s in item.get("simulated") or [] if s not in simulated]
    missing = sorted({m for item in plans for m in item.get("missing") or []})
    # A knob this site cannot apply (netem delay on a kernel without netem): the drill runs without it.
    not_injected = sorted({m for item in plans for m in item.get("not_injected") or []})
    drill = {
        "id": drill_id, "experiment": experiment.name, "family": experiment.family, "summary": experiment.summary,
        "params": resolved, "backend": params.get("backend") or "default",
        "targets": [t["name"] for t in targets], "dry_run": bool(check_mode), "lab": bool(params.get("lab_dir")),
        # The role runs such a fault on the target's own host (chaos_drill_fault_host).
        "on_host": experiments.acts_on_host(experiment, resolved),
        "simulated": simulated, "missing": missing, "not_injected": not_injected, "started_at": now,
        "duration": float(params["duration"]),
        # Until its first injection the drill also has the time to get there (INJECT_WITHIN_S): a slow
        # steady-state check must not let its watchdog end it before anything was injected.
        "expires_at": now + float(params["duration"]) + INJECT_WITHIN_S, "holder": _holder(),
        "expectations": experiments.loop_expectations(experiment, resolved), "deadlines": deadlines,
        "abort_conditions": abort_conditions,
    }
    if missing and not check_mode:
        raise DrillRefused([{"field": "experiment", "why": "this site lacks what %s needs: %s"
                             % (experiment.name, "; ".join(missing))}])
    if not check_mode:
        entry = {k: drill[k] for k in ("id", "experiment", "targets", "started_at", "expires_at", "holder")}

        def register(data: ledger.Data) -> Any:
            # The rails again, on the ledger this write replaces: two drills gated at the same moment
            # are serialised by the compare-and-swap, and the second sees the first.
            again = refusals_in(data)
            return (None, again) if again else (ledger.add_drill(data, entry), [])

        refusals = store.update(register)
        if refusals:
            raise DrillRefused(refusals)
    phase = {"phase": "gate", "started_at": now, "finished_at": time.time(), "ok": True,
             "detail": {"targets": drill["targets"], "plan": plans}}
    return {"changed": not check_mode, "drill": drill, "plan": plans, "phase": phase}


# -- steady state, baseline, verify --------------------------------------------------------------
def _condition(node: Any, kind: str) -> Optional[str]:
    return next((c.status for c in node.status.conditions or [] if c.type == kind), None) if node.status else None


def steady_checks(params: Mapping[str, Any], drill: Mapping[str, Any], verify: bool) -> List[Dict[str, Any]]:
    kube, slurm = _kube(params), _slurm(params)
    checks: List[Dict[str, Any]] = []
    targets = list(drill.get("targets") or [])
    storm = bool((drill.get("expectations") or {}).get("breaker"))
    refused: set = set()  # the targets a storm drill's breaker refused (verify)
    held: Dict[str, str] = {}  # the targets a repeat drill's escalation held, and why (verify)

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    limit = check_number(params.get("max_not_ready_percent", 10.0), "max_not_ready_percent", minimum=0, maximum=100)
    if kube is not None:
        nodes = {n.metadata.name: n for n in kube.list_node(label_selector=POOL_LABEL).items}
        pools = {(nodes[t].metadata.labels or {}).get(POOL_LABEL) for t in targets if t in nodes}
        for pool in sorted(p for p in pools if p):
            members = [n for n in nodes.values() if n.metadata.labels.get(POOL_LABEL) == pool]
            bad = [n.metadata.name for n in members if _condition(n, "Ready") != "True"]
            percent = 100.0 * len(bad) / max(1, len(members))
            check("not_ready:%s" % pool, percent <= limit, "%d of %d nodes NotReady (%.0f%%, limit %.0f%%)%s" % (
                len(bad), len(members), percent, limit, ": " + ", ".join(bad) if bad else ""))
        breaker = observe.breaker_state(kube, params.get("namespace") or "gpufleet-system")
        tripped = bool(breaker.get("tripped"))
        if verify and storm:
            # After a storm drill the open breaker is what it proved; it stays open until an operator
            # closes it, and says so, since every fatal node is now only fenced in Slurm.
            refused = {str(e.get("node")) for e in breaker.get("refused") or []} & set(targets)
            state = ("OPEN, as the storm drill expects: until playbooks/remediation-reset.yml closes it, every "
                     "fatal node is only fenced in Slurm; the reset takes up the refused targets (%s)"
                     % ", ".join(sorted(refused))) if tripped else "closed"
            check("breaker", True, "the remediation circuit breaker is " + state)
        else:
            check("breaker", not tripped, "the remediation circuit breaker is %s" % ("OPEN" if tripped else "closed"))
        if verify and (drill.get("expectations") or {}).get("escalation"):
            # After a repeat drill the held target is what it proved: fenced until a human returns it.
            for target in targets:
                plan = observe.remediation_progress(kube, params.get("namespace") or "gpufleet-system",
                                                    target).get("plan") or {}
                if plan.get("name") == "HOLD":
                    held[target] = plan.get("why") or "held"
        for target in targets:
            node = nodes.get(target)
            if node is None:
                gone_ok = verify and drill.get("expectations", {}).get("fences")
                check("target:%s" % target, bool(gone_ok), "replaced by the remediation" if gone_ok else "not found")
                continue
            if target in held:
                check("target:%s" % target, True, "held for a human by escalation (%s): fenced and quarantined until "
                      "playbooks/return-node.yml returns it" % held[target])
                continue
            gpu = _condition(node, "GpuHealthy")
            cordoned = bool(node.spec.unschedulable)
            check("target:%s" % target, gpu in ("True", None) and not cordoned,
                  "GpuHealthy=%s, %s%s" % (gpu, "cordoned" if cordoned else "schedulable",
                                           "; refused by the breaker" if target in refused else ""))
    if slurm is not None:
        found = slurm.nodes(with_jobs=False)
        for target in targets:
            if target not in found:
                continue  # replaced: the Kubernetes check above judges it
            states = (found[target].state, *found[target].flags)
            fenced = any(s in observe.FENCED_STATES for s in states)
            reason = " (%s)" % found[target].reason if found[target].reason else ""
            if target in refused:
                # Refused by the breaker: fenced in Slurm by the remediation, waiting for the reset.
                check("slurm:%s" % target, fenced, "+".join(states) + reason + "; refused by the breaker, "
                      "fenced until playbooks/remediation-reset.yml takes it up")
                continue
            if target in held:
                check("slurm:%s" % target, fenced, "+".join(states) + reason + "; held by escalation, fenced until "
                      "playbooks/return-node.yml returns it")
                continue
            check("slurm:%s" % target, not fenced, "+".join(states) + reason)
        job_id = params.get("protected_job")
        if job_id:
            check_job_ids([job_id], "protected_job")
            job = next((j for j in slurm.jobs() if j.job_id == str(job_id)), None)
            check("protected_job", job is not None and job.state == "RUNNING",
                  "job %s is %s" % (job_id, job.state if job else "not in the queue"))
    store = ledger_store(params, kube)
    others = [e for e in ledger.active_on(_read(store), targets)
              if e.get("id") != drill.get("id") and e.get("drill") != drill.get("id")]
    check("no_other_drill", not others, ", ".join(e["id"] for e in others) or "none")
    return checks


def baseline(params: Mapping[str, Any], drill: Mapping[str, Any]) -> Dict[str, Any]:
    kube = _kube(params)
    found: Dict[str, Any] = {"detection": {}, "alerts": {}, "breaker_tripped": False}
    detection = (drill.get("expectations") or {}).get("detection")
    for node in drill.get("targets") or []:
        if detection and params.get("prometheus_url"):
            found["detection"][node] = observe.detection_value(params["prometheus_url"], detection, node,
                                                               drill.get("params") or {})
        if params.get("alertmanager_url"):
            found["alerts"][node] = observe.firing_alerts(params["alertmanager_url"], node)
    if kube is not None:
        found["breaker_tripped"] = observe.breaker_tripped(kube, params.get("namespace") or "gpufleet-system")
    return found


def drill_check(params: Mapping[str, Any], now: Optional[float] = None,
                sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    started = time.time() if now is None else now
    drill = check_drill(params["drill"])
    verify = params.get("mode") == "verify"
    deadline = started + check_number(params.get("timeout") or 0, "timeout", minimum=0)
    while True:
        checks = steady_checks(params, drill, verify)
        ok = all(c["ok"] for c in checks)
        if ok or time.time() >= deadline:
            break
        sleep(1.0)
    failed = [c for c in checks if not c["ok"]]
    result = {"changed": False, "ok": ok, "checks": checks}
    detail: Dict[str, Any] = {"checks": checks}
    if not ok and not verify:
        detail["abort_reason"] = "steady-state check failed: " + "; ".join(
            "%s: %s" % (c["check"], c["detail"]) for c in failed)
    if ok and not verify:
        result["baseline"] = baseline(params, drill)
        detail["baseline"] = result["baseline"]
    if not ok and verify:
        detail["error"] = "not back to steady state: " + "; ".join("%s: %s" % (c["check"], c["detail"]) for c in failed)
    result["phase"] = {"phase": "verify" if verify else "steady", "started_at": started, "finished_at": time.time(),
                       "ok": ok, "detail": detail}
    return result


# -- inject and roll back ------------------------------------------------------------------------
def inject(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None) -> Dict[str, Any]:
    drill = check_drill(params["drill"], "id", "experiment", "family", "targets", "duration")
    if family_module(drill["family"]) is None:
        raise FieldError("drill.family", "unknown family %r" % (drill["family"],))
    started = time.time() if now is None else now
    # The expiry the watchdog acts on: a NaN one never comes, so the fault would never be rolled back.
    duration = check_number(drill.get("duration"), "drill.duration", above=0)
    if params.get("duration") is not None:
        duration = check_number(params["duration"], "duration", above=0, maximum=duration)
    for node in drill.get("targets") or []:
        check_node_name(node, "drill.targets")
    store = ledger_store(params)
    ctx = from_params(params, check_mode)
    family = family_module(drill["family"])
    experiment = experiments.get(drill["experiment"])
    nodes = list(drill["targets"])
    if params.get("nodes"):
        unknown = [n for n in params["nodes"] if n not in nodes]
        if unknown:
            raise FieldError("nodes", "not targets of drill %s: %s" % (drill["id"], ", ".join(map(str, unknown))))
        nodes = [n for n in nodes if n in params["nodes"]]
    node_name = params.get("node_name") or None
    if node_name is not None:
        check_node_name(node_name, "node_name")
    specs = {node: _spec(drill, node, "f-%s-%s" % (drill["id"][2:], node), params.get("lab_dir")) for node in nodes}
    for node in nodes:  # every target first: a refusal leaves nothing injected, nothing in the ledger
        check_on_target(experiment, specs[node], node_name)
    on_host = experiments.acts_on_host(experiment, drill.get("params") or {})
    injected = []
    if ledger.kill_switch(_read(store)).get("on"):
        raise DrillRefused([{"field": "kill_switch", "why": "the chaos kill switch went on; nothing injected"}])
    for node in nodes:
        spec = specs[node]
        fault_id = spec["fault_id"]
        if check_mode:
            injected.append({"id": fault_id, "node": node, "plan": family.plan(spec)})
            continue
        at = time.time()
        entry = {"id": fault_id, "drill": drill["id"], "experiment": drill["experiment"], "family": drill["family"],
                 "node": node, "backend": drill.get("backend") or "default", "spec": spec,
                 "expires_at": at + duration, "holder": _holder(),
                 # Where it was injected: its rollback acts there (revert_here).
                 "host": this_host(), "on_host": on_host}
        if not update_if(store, lambda d, e=entry: ledger.add_drill_fault(d, e)):
            raise DrillRefused([{"field": "drill", "why": "drill %s is no longer in the chaos ledger: its expiry "
                                 "passed before anything was injected (gate + duration + %.0f s), or the kill switch "
                                 "ended it; nothing injected on %s" % (drill["id"], INJECT_WITHIN_S, node)}])
        try:
            undo = family.inject(spec, ctx)
        except FieldError:
            # Bad input is refused before any change (the family contract): nothing to roll back.
            store.update(lambda d, i=fault_id: (ledger.finish(d, i, "refused", time.time(), []), None))
            raise
        store.update(lambda d, i=fault_id, u=undo, t=at: (ledger.activate(d, i, u, t), None))
        injected.append({"id": fault_id, "node": node, "injected_at": at, "expires_at": entry["expires_at"],
                         "undo": undo, "host": entry["host"]})
    injected_at = min([f["injected_at"] for f in injected if "injected_at" in f] or [started])
    summary = [{k: f.get(k) for k in ("id", "node", "host", "injected_at", "expires_at")} for f in injected]
    phase = {"phase": "inject", "started_at": started, "finished_at": time.time(), "ok": True,
             "detail": {"faults": summary}}
    return {"changed": not check_mode, "faults": injected, "injected_at": injected_at, "phase": phase}


def _fault_row(entry: Mapping[str, Any], **outcome: Any) -> Dict[str, Any]:
    row = {"id": entry["id"], "node": entry.get("node"), "backend": entry.get("backend"),
           "injected_at": entry.get("injected_at"), "host": entry.get("host")}
    row.update(outcome)
    return row


def revert_entry(store: Any, entry: Mapping[str, Any], ctx: FaultContext, how: str) -> Dict[str, Any]:
    """Revert one ledger entry. A failure stays in the ledger (rollback_failed), for the next try."""
    family = family_module(entry.get("family") or "")
    undo = dict(entry.get("spec") or {})
    undo.update(entry.get("undo") or {})
    if not revert_here(entry):
        # Its files, qdiscs or processes are on another host: reverting here would touch this
        # host's own files. It stays in the ledger, as it was, for a rollback there.
        return _fault_row(entry, rolled_back_at=None, rollback="refused", actions=[],
                          error="fault %s was injected on host %s and acts on that host: roll it back there "
                                "(delegate to %s, or playbooks/chaos-stop.yml with %s in the inventory); this is "
                                "%s, nothing was reverted here" % (entry["id"], entry["host"], entry["host"],
                                                                   entry["host"], this_host()))
    if ctx.check_mode:
        return _fault_row(entry, rolled_back_at=None, rollback="planned", actions=["(check mode)"])
    try:
        if family is None:
            raise GpufleetError("unknown family %r" % entry.get("family"))
        done = family.revert(undo, ctx)
    except Exception as exc:  # one fault's failure must not stop the others' rollback
        error = str(exc)
        store.update(lambda data: (ledger.record_attempt(data, entry["id"], error, time.time()), None))
        return _fault_row(entry, rolled_back_at=None, rollback="failed", error=error, actions=[])
    at = time.time()
    reverted = list(done.get("reverted") or [])
    observed = done.get("observed") or None
    store.update(lambda data: (ledger.finish(data, entry["id"], how, at, reverted, observed), None))
    # What the family saw while the fault was on (the network family's eBPF counts) goes in the report.
    seen = {"observed": done["observed"]} if done.get("observed") else {}
    return _fault_row(entry, rolled_back_at=at, rollback="done", actions=reverted, **seen)


def rollback_entries(store: Any, entries: List[Dict[str, Any]], ctx: FaultContext,
                     how: str) -> List[Dict[str, Any]]:
    return [revert_entry(store, entry, ctx, how) for entry in entries]


def rollback(params: Mapping[str, Any], check_mode: bool) -> Dict[str, Any]:
    started = time.time()
    store = ledger_store(params)
    data = _read(store)
    drill_id = (params.get("drill") or {}).get("id") or params.get("drill_id")
    fault_id = params.get("fault_id")
    entries = [f for f in ledger.faults(data).values() if (drill_id is None or f.get("drill") == drill_id)
               and (fault_id is None or f.get("id") == fault_id)]
    results = rollback_entries(store, entries, from_params(params, check_mode), params.get("how") or "drill")
    # Faults of this drill that something else (the watchdog) already rolled back.
    for done in ledger.history(_read(store)):
        if drill_id and done.get("drill") == drill_id and done["id"] not in {r["id"] for r in results} \
                and (fault_id is None or done["id"] == fault_id):
            results.append({"id": done["id"], "node": done.get("node"), "backend": done.get("backend"),
                            "host": done.get("host"),
                            "injected_at": done.get("injected_at"), "rolled_back_at": done.get("rolled_back_at"),
                            "rollback": "done", "actions": done.get("reverted") or [],
                            "by": done.get("rolled_back_by"),
                            **({"observed": done["observed"]} if done.get("observed") else {})})
    ok = all(r["rollback"] == "done" for r in results)
    phase = {"phase": "rollback", "started_at": started, "finished_at": time.time(), "ok": ok,
             "detail": {"faults": results, **({} if ok else {"error": "; ".join(
                 "%s: %s" % (r["id"], r.get("error")) for r in results if r["rollback"] != "done")})}}
    # A fault refused here (it acts on another host) was not touched.
    changed = not check_mode and any(r["rollback"] != "refused" for r in results[:len(entries)])
    return {"changed": changed, "faults": results, "ok": ok, "phase": phase}


# -- the ledger: kill switch, expiry watchdog, end of a drill ------------------------------------
def ledger_state(params: Mapping[str, Any], check_mode: bool, now: Optional[float] = None,
                 sleep: Callable[[float], None] = time.sleep) -> Dict[str, Any]:
    state = params.get("state") or "read"
    store = ledger_store(params)
    ctx = from_params(params, check_mode)
    result: Dict[str, Any] = {"changed": False}
    if state == "stopped":
        if not check_mode:
            store.update(lambda d: (ledger.set_kill_switch(d, True, _holder(), params.get("reason") or "", time.time()),
                                    None))
        entries = list(ledger.faults(_read(store)).values())
        result["rolled_back"] = rollback_entries(store, entries, ctx, "kill_switch")
        if not check_mode:
            # Every drill is over: a drill still running finds its faults gone and reports so.
            store.update(lambda d: (ledger.remove_drills(d), None))
        result["changed"] = not check_mode
    elif state == "cleared":
        before = ledger.kill_switch(_read(store))
        if before.get("on") and not check_mode:
            store.update(lambda d: (ledger.set_kill_switch(d, False, _holder(), params.get("reason") or "",
                                                           time.time()), None))
        result["changed"] = bool(before.get("on")) and not check_mode
    elif state == "expired":
        problems: List[str] = []
        result["rolled_back"] = watch_expiry(store, ctx, params.get("drill_id"), bool(params.get("wait")), sleep,
                                             problems=problems)
        result["changed"] = bool(result["rolled_back"]) and not check_mode
        if problems:
            result["problems"] = problems
    elif state == "finished":
        drill_id = params.get("drill_id")
        if not drill_id:
            raise FieldError("drill_id", "state=finished needs the drill's id")
        if drill_id in ledger.drills(_read(store)) and not check_mode:
            store.update(lambda d: (ledger.remove_drill(d, drill_id), None))
            result["changed"] = True
    data = _read(store)
    result.update(kill_switch=ledger.kill_switch(data), faults=list(ledger.faults(data).values()),
                  drills=list(ledger.drills(data).values()), completeness=ledger.completeness(data))
    return result


def watch_expiry(store: Any, ctx: FaultContext, drill_id: Optional[str], wait: bool,
                 sleep: Callable[[float], None], clock: Callable[[], float] = time.time,
                 problems: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """Roll back the faults whose duration is over. With ``wait`` (the watchdog: an async task the
    drill starts right after its gate, before anything is injected) keep watching while the drill
    is registered or has faults; a drill whose controller died is ended at its expiry.

    The watchdog is a safety rail: one failed look (the API server slow to answer under load, a
    timeout) must not end it, or the fault stays until the chaos warden's grace has passed. It is
    noted in ``problems`` and tried again ``WATCH_RETRY_S`` later, until the task's async limit.
    Without ``wait`` (one look) the error is the caller's."""
    rolled: List[Dict[str, Any]] = []
    reinjected: Dict[str, float] = {}
    while True:
        try:
            pause = _watch_once(store, ctx, drill_id, wait, rolled, reinjected, clock)
        except (GpufleetError, OSError) as exc:
            if not wait:
                raise
            if problems is not None:
                problems.append("at %.0f: %s" % (clock(), exc))
            pause = WATCH_RETRY_S
        if pause is None:
            return rolled
        sleep(pause)


def _watch_once(store: Any, ctx: FaultContext, drill_id: Optional[str], wait: bool, rolled: List[Dict[str, Any]],
                reinjected: Dict[str, float], clock: Callable[[], float]) -> Optional[float]:
    """One look of the watchdog: roll back what expired. Returns the seconds until the next look,
    or None when there is nothing left to watch."""
    data = _read(store)
    now = clock()
    # Only what this host may revert: a fault recorded on another host is its own watchdog's.
    rolled += rollback_entries(store, [f for f in ledger.expired(data, now, drill_id) if revert_here(f)], ctx,
                               "expiry")
    data = _read(store)
    left = [f for f in ledger.faults(data).values() if drill_id is None or f.get("drill") == drill_id]
    drill = ledger.drills(data).get(drill_id or "")
    if drill and not left and drill.get("expires_at", now) <= now and not ctx.check_mode \
            and update_if(store, lambda d, i=drill["id"]: ledger.end_if_empty(d, i, now)):
        drill = None
    if not wait or not (left or drill):
        return None
    for entry in left:
        if revert_here(entry):
            reinject_expiring(entry, reinjected, now)
    expiries = [f.get("expires_at", now) for f in left]
    if drill:
        expiries.append(drill.get("expires_at", now))
    return min(5.0, max(0.5, min(expiries) - clock()))


def reinject_expiring(entry: Mapping[str, Any], last: Dict[str, float], now: float,
                      every_s: float = REINJECT_EVERY_S) -> None:
    """DCGM forgets injected values after a while: inject them again while the fault is active."""
    family = family_module(entry.get("family") or "")
    reinject = getattr(family, "reinject", None)
    if reinject is None or entry.get("state") != "active":
        return
    previous = last.setdefault(entry["id"], float(entry.get("injected_at") or now))
    if now - previous < every_s:
        return
    last[entry["id"]] = now
    reinject(dict(entry.get("spec") or {}, **(entry.get("undo") or {})))


def observe_drill(params: Mapping[str, Any]) -> Dict[str, Any]:
    started = time.time()
    drill = check_drill(params["drill"], "targets", "expectations", "deadlines", "experiment")
    kube = _kube(params)
    probes = observe.Probes(params.get("prometheus_url"), params.get("alertmanager_url"), kube, _slurm(params),
                            params.get("namespace") or "gpufleet-system", _read_text)
    request = {"nodes": drill["targets"], "expectations": drill["expectations"], "deadlines": drill["deadlines"],
               "params": drill.get("params") or {}, "baseline": params.get("baseline") or {},
               "injected_at": params["injected_at"], "protected_job": params.get("protected_job"),
               "protected_output": params.get("protected_output"), "experiment": drill["experiment"],
               "poll_s": check_number(params.get("poll_interval") or 1.0, "poll_interval", above=0),
               # The drill's own (the gate checked them), unless this call gives others.
               "brakes": brakes.check_brakes(params.get("abort_conditions") if params.get("abort_conditions")
                                             is not None else drill.get("abort_conditions"))}
    carry = _check_carry(params.get("carry"))
    if carry:
        started = carry["started_at"]
    watch_for = params.get("watch_for")
    until = None if watch_for is None else time.time() + check_number(watch_for, "watch_for", above=0)
    seen = observe.observe(request, probes, carry=carry, until=until)
    seen["changed"] = False
    if not seen["done"]:
        seen["carry"]["started_at"] = started
        return seen
    if request["brakes"] and not params.get("prometheus_url"):
        seen["findings"].append("brakes not applied: %s need Prometheus (prometheus_url)" % ", ".join(
            brake.name for brake in request["brakes"]))
    seen["phase"] = {"phase": "observe", "started_at": started, "finished_at": time.time(),
                     "ok": not seen["aborted"], "detail": {"abort_reason": seen["aborted"]} if seen["aborted"] else {}}
    return seen


def _check_carry(carry: Any) -> Optional[Dict[str, Any]]:
    """A previous slice's `carry`, as drill_observe returned it: data, checked for its shape only."""
    if not carry:
        return None
    kinds = {"decided": dict, "last": dict, "recovered": dict, "events": list, "braking": dict,
             "started_at": (int, float)}
    if not isinstance(carry, Mapping) or set(carry) != set(kinds):
        raise FieldError("carry", "must be the carry a previous drill_observe returned (keys %s)" % ", ".join(kinds))
    for key, kind in kinds.items():
        if not isinstance(carry[key], kind):
            raise FieldError("carry.%s" % key, "must be a %s" % (kind.__name__ if isinstance(kind, type) else "number"))
    return dict(carry)


def _read_text(path: str) -> str:
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""
