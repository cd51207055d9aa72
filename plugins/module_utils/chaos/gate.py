# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The safety rails every drill passes before any injection. Pure: facts in, refusals out.

A refusal names the field to change (``target``, ``blast_radius.max_nodes``, ``duration``, ...)
and says why. Any refusal stops the drill before it touches anything.

* opt-in: every target carries the opt-in label (default ``gpufleet.io/chaos=allowed``), or is
  listed in the inventory's ``chaos_allowed_nodes`` (bare metal without Kubernetes labels);
* blast radius: at most ``max_nodes`` nodes, and at most ``max_percent`` of any pool;
* duration: every injection has one, at most ``max_duration_s``;
* kill switch: while it is on, nothing new starts;
* one drill per node: a target with an active fault or drill is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number

OPT_IN_LABEL = "gpufleet.io/chaos"
OPT_IN_VALUE = "allowed"


@dataclass(frozen=True)
class Rails:
    max_nodes: int = 1
    max_percent: float = 25.0
    max_duration_s: float = 3600.0
    opt_in_label: str = OPT_IN_LABEL
    opt_in_value: str = OPT_IN_VALUE

    @classmethod
    def from_dict(cls, blast: Optional[Mapping[str, Any]], max_duration_s: Any = None) -> "Rails":
        blast = dict(blast or {})
        unknown = set(blast) - {"max_nodes", "max_percent"}
        if unknown:
            raise FieldError("blast_radius.%s" % sorted(unknown)[0], "unknown key; keys: max_nodes, max_percent")
        max_nodes = blast.get("max_nodes", cls.max_nodes)
        if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
            raise FieldError("blast_radius.max_nodes", "must be an integer >= 1, got %r" % (max_nodes,))
        # Finite numbers only: max_duration=nan made every "duration > cap" false, lifting the cap.
        max_percent = check_number(blast.get("max_percent", cls.max_percent), "blast_radius.max_percent",
                                   above=0, maximum=100)
        limit = cls.max_duration_s if max_duration_s is None else max_duration_s
        limit = check_number(limit, "max_duration", above=0)
        return cls(max_nodes=max_nodes, max_percent=max_percent, max_duration_s=limit)


def refusals(
    targets: Sequence[Mapping[str, Any]],
    pool_sizes: Mapping[str, int],
    rails: Rails,
    duration_s: Any,
    allowed_nodes: Sequence[str] = (),
    kill_switch: Optional[Mapping[str, Any]] = None,
    busy: Sequence[Mapping[str, Any]] = (),
    under_chaos: Sequence[Mapping[str, Any]] = (),
    not_alone: Sequence[str] = (),
) -> List[Dict[str, str]]:
    """``targets``: [{"name", "labels", "pool"}]; ``busy``: ledger entries already on those nodes;
    ``under_chaos``: [{"name", "pool"}] the nodes other active drills hold - the blast radius counts
    them too, so concurrent drills cannot add up to more than the caps. ``not_alone``: for an
    exclusive drill (a scheduled one), what else is going on in the fleet - other drills anywhere,
    remediations under way - each a refusal."""
    found: List[Dict[str, str]] = []

    def refuse(field: str, why: str) -> None:
        found.append({"field": field, "why": why})

    if kill_switch and kill_switch.get("on"):
        refuse("kill_switch", "the chaos kill switch is on (%s, by %s): clear it with playbooks/chaos-stop.yml "
               "-e chaos_drill_stop_clear=true" % (kill_switch.get("why") or "no reason given",
                                                   kill_switch.get("by") or "?"))
    if not targets:
        refuse("target", "matches no node")
    # NaN passed "<= 0" and "> cap" alike, and its expiry (now + nan) never came: the watchdog never rolled back.
    if (isinstance(duration_s, bool) or not isinstance(duration_s, (int, float)) or not math.isfinite(duration_s)
            or duration_s <= 0):
        refuse("duration", "every injection needs a positive, finite duration in seconds, got %r" % (duration_s,))
    elif duration_s > rails.max_duration_s:
        refuse("duration", "%ss is over the cap max_duration=%ss" % (duration_s, rails.max_duration_s))
    allowed = set(allowed_nodes)
    for node in targets:
        labels = node.get("labels") or {}
        if labels.get(rails.opt_in_label) != rails.opt_in_value and node["name"] not in allowed:
            refuse("target", "%s has not opted in: label it %s=%s (or list it in chaos_allowed_nodes)"
                   % (node["name"], rails.opt_in_label, rails.opt_in_value))
    names = {node["name"] for node in targets}
    others = [node for node in under_chaos if node["name"] not in names]
    also = " + %d already under chaos" % len(others) if others else ""
    if len(targets) + len(others) > rails.max_nodes:
        refuse("blast_radius.max_nodes", "%d nodes targeted%s, the cap is %d" % (len(targets), also, rails.max_nodes))
    per_pool: Dict[str, int] = {}
    for node in list(targets) + others:
        per_pool[node.get("pool") or ""] = per_pool.get(node.get("pool") or "", 0) + 1
    for pool, count in sorted(per_pool.items()):
        size = pool_sizes.get(pool) or count
        cap = max(1, math.floor(size * rails.max_percent / 100.0))
        if count > cap and any((node.get("pool") or "") == pool for node in targets):
            refuse("blast_radius.max_percent", "%d of the %d nodes of pool %s under chaos with this drill; %s%% "
                   "allows %d" % (count, size, pool or "(none)", rails.max_percent, cap))
    for what in not_alone:
        refuse("exclusive", "%s: an exclusive drill runs only on a quiet fleet" % what)
    for entry in busy:
        refuse("target", "%s already has an active chaos %s (%s)" % (
            entry.get("node") or ",".join(entry.get("targets") or []), entry.get("kind", "fault"), entry.get("id")))
    return found
