# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A drill's brakes: abort conditions, each a PromQL query with a threshold and a duration.

Krkn, Litmus and Chaos Toolkit stop an experiment when the service it probes breaks its level; a
drill here stops the same way. During the observation every brake's query is asked each poll; a
brake whose value stays above its threshold for its duration aborts the watch, the fault is rolled
back at once (the role's always block), and the report says ``aborted`` and which brake, with the
value it saw. A query that yields nothing has no value: it never breaches (``count(...)`` of no
series is no value, not 0).

``$targets`` in a query is the drill's targets as a regular expression (``gpu-a-001|gpu-a-002``,
each matched literally), so a brake can watch the nodes that are *not* the drill's.

Pure: the value of a query comes from the caller (observe.py asks Prometheus).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number

_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
MAX_QUERY = 2000
MAX_DURATION_S = 3600


@dataclass(frozen=True)
class Brake:
    name: str
    query: str
    above: float
    for_s: float = 0.0

    def query_for(self, targets: Sequence[str]) -> str:
        return self.query.replace("$targets", "|".join(_promql_regex_literal(target) for target in targets))

    def as_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "query": self.query, "above": self.above, "for": self.for_s}


_SPECIAL = set("\\.+*?()|[]{}^$")


def _promql_regex_literal(text: str) -> str:
    """``text`` matched literally by a regular expression inside a PromQL string: a special character
    gets a backslash, which the string itself needs doubled (``gpu-a.001`` -> ``gpu-a\\\\.001``)."""
    return "".join("\\\\" + char if char in _SPECIAL else char for char in text)


# The default for every drill: a drill acts on its targets, so more than one other node going
# unhealthy while it runs is a fleet in trouble that the drill must not add to. One other node is
# allowed: a GPU dies every few hours on a large fleet, and a drill should not stop for that.
DEFAULTS = (
    Brake("other_nodes_unhealthy",
          'count(gpufleet_node_health_verdict{state!="healthy",node!~"$targets"} == 1)', above=1.0),
)


def check_brakes(raw: Any, field: str = "abort_conditions") -> List[Brake]:
    """The brakes given (a list of {name, query, above, for}); None gives DEFAULTS, [] none at all.
    FieldError names the bad entry's field, e.g. abort_conditions[1].above."""
    if raw is None:
        return list(DEFAULTS)
    if not isinstance(raw, (list, tuple)):
        raise FieldError(field, "must be a list of {name, query, above, for}, not %r" % (raw,))
    brakes: List[Brake] = []
    for index, entry in enumerate(raw):
        where = "%s[%d]" % (field, index)
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping {name, query, above, for}")
        unknown = sorted(set(entry) - {"name", "query", "above", "for"})
        if unknown:
            raise FieldError("%s.%s" % (where, unknown[0]), "is not a key of an abort condition (name, query, "
                                                            "above, for)")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise FieldError(where + ".name", "must be a lower-case name (letters, digits, '_'), not %r" % (name,))
        if name in {brake.name for brake in brakes}:
            raise FieldError(where + ".name", "%s is given twice" % name)
        query = entry.get("query")
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY:
            raise FieldError(where + ".query", "must be a PromQL query of at most %d characters" % MAX_QUERY)
        above = check_number(entry.get("above"), where + ".above")
        duration = check_number(entry.get("for", 0), where + ".for", minimum=0, maximum=MAX_DURATION_S)
        brakes.append(Brake(name, query, float(above), float(duration)))
    return brakes


def breached(brakes: Sequence[Brake], targets: Sequence[str], value_of: Callable[[str], Optional[float]],
             since: Dict[str, float], now: float) -> Optional[str]:
    """Ask every brake once. ``since`` (name -> when its breach began) is the state kept between
    polls, updated here; the reason to abort when a breach has lasted its duration, else None."""
    for brake in brakes:
        value = value_of(brake.query_for(targets))
        if value is None or not value > brake.above:
            since.pop(brake.name, None)
            continue
        began = since.setdefault(brake.name, now)
        if now - began >= brake.for_s:
            held = " for %.0f s" % (now - began) if brake.for_s else ""
            return "abort condition %s breached: %s = %g, above %g%s" % (
                brake.name, brake.query_for(targets), value, brake.above, held)
    return None
