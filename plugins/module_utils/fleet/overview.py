# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The fleet at a glance, for playbooks/fleet_status.yml (pure): per GPU node its Kubernetes and
Slurm state, the agent's verdict, quarantine, hold and remediation; then the breaker and the
drills and faults in progress. Everything comes from objects any backend has (the Nodes, the
breaker, the chaos ledger), so the same view works on the lab, an existing cluster and k3s.

A remediation is read from the node annotation ``gpufleet.io/remediation``, the mirror of its
progress record that the remediation writes with every phase: a node being replaced, whose Node is
already deleted, is listed by its replacement's remediation only.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.status import fixed_width, fleet_status
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.remediation_objects import (
    ANNOTATION,
    QUARANTINE_TAINT,
)

# roles/remediation's remediation_hold_label; a site that changed it (or the taint) passes its own.
HOLD_LABEL = "gpufleet.io/remediation-hold"

TABLE_COLUMNS = (("NODE", "name", 14), ("POOL", "pool", 8), ("K8S", "k8s", 9), ("SLURM", "slurm_state", 11),
                 ("AGENT", "agent", 10), ("QUARANTINED", "quarantined", 12), ("HELD", "held", 5),
                 ("REMEDIATION", "remediation_summary", 0))


def _remediation(node: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {"summary": "unreadable %s annotation" % ANNOTATION}
    return record if isinstance(record, dict) else {"summary": "unreadable %s annotation" % ANNOTATION}


def overview(nodes: Iterable[Mapping[str, Any]], slurm_nodes: Iterable[Any], breaker: Optional[Mapping[str, Any]],
             ledger: Optional[Mapping[str, Any]], quarantine_taint: str = QUARANTINE_TAINT,
             hold_label: str = HOLD_LABEL) -> Dict[str, Any]:
    """One dict for machines (fleet-status.yml -e fleet_status_json=PATH) and for the table."""
    nodes = list(nodes)
    by_name = {(node.get("metadata") or {}).get("name"): node for node in nodes}
    rows = []
    for row in fleet_status(nodes, list(slurm_nodes)):
        node = by_name.get(row["name"]) or {}
        taints = [taint.get("key") for taint in (node.get("spec") or {}).get("taints") or []]
        labels = (node.get("metadata") or {}).get("labels") or {}
        remediation = _remediation(node)
        open_remediation = bool(remediation) and not remediation.get("result")
        rows.append(dict(row, quarantined=quarantine_taint in taints, held=labels.get(hold_label) == "true",
                         remediation=remediation, remediating=open_remediation,
                         remediation_summary=(remediation or {}).get("summary")))
    breaker = dict(breaker or {})
    ledger = dict(ledger or {})
    return {
        "nodes": rows,
        "quarantined": [row["name"] for row in rows if row["quarantined"]],
        "held": [row["name"] for row in rows if row["held"]],
        "remediations": [dict(row["remediation"], node=row["name"]) for row in rows if row["remediating"]],
        "breaker": breaker,
        "drills": list(ledger.get("drills") or []),
        "faults": list(ledger.get("faults") or []),
        "kill_switch": dict(ledger.get("kill_switch") or {}),
    }


def overview_table(view: Mapping[str, Any]) -> List[str]:
    """Lines for a terminal: one per node, then the breaker, the drills and the faults."""
    lines = fixed_width(TABLE_COLUMNS, [dict(row, quarantined="yes" if row["quarantined"] else "no",
                                             held="yes" if row["held"] else "no") for row in view["nodes"]])
    breaker = view.get("breaker") or {}
    if breaker.get("tripped"):
        lines.append("breaker: OPEN since %s: %s; refused: %s" % (
            breaker.get("tripped_at"), breaker.get("tripped_why") or "-",
            ", ".join(str(node) for node in breaker.get("refused") or []) or "none"))
    else:
        # A node remediated again in the window has a slot per run, and counts once (breaker.take_slot).
        nodes = {slot.get("node") if isinstance(slot, dict) else slot for slot in breaker.get("slots") or []}
        lines.append("breaker: closed (%d node(s) in its window)" % len(nodes))
    lines.append("remediations under way: %s" % (
        ", ".join("%s (%s)" % (r["node"], r.get("summary") or r.get("id")) for r in view["remediations"]) or "none"))
    lines.append("held for a human: %s" % (", ".join(view["held"]) or "none"))
    kill_switch = view.get("kill_switch") or {}
    lines.append("drills: %s; faults active: %s%s" % (
        ", ".join(str(d.get("id")) for d in view["drills"]) or "none",
        ", ".join("%s on %s" % (f.get("experiment") or f.get("id"), f.get("node")) for f in view["faults"])
        or "none",
        "; KILL SWITCH ON (%s)" % (kill_switch.get("why") or "-") if kill_switch.get("on") else ""))
    return lines
