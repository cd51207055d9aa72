# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Other remediators on a node: two never act on one node.

A site may run NVSentinel, draino or its own controller beside us. Each marks the nodes it is
working on; where such a mark is present, our remediation does not start (nothing is claimed,
fenced or written), and says which remediator holds the node. The marks are data: a label, a
taint, an annotation or a node condition, each with the name of its owner. Pure: the caller
reads the Node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_text

KINDS = ("label", "taint", "annotation", "condition")


@dataclass(frozen=True)
class Marker:
    """`kind` `key` on a Node (with `value`, if given) means `owner` is working on it. A condition
    counts when its status is True (or `value`)."""

    owner: str
    kind: str
    key: str
    value: Optional[str] = None

    def describe(self) -> str:
        return "%s %s%s" % (self.kind, self.key, "" if self.value is None else "=" + self.value)


# What the remediators we know of put on a node while they work on it (their own documentation
# and code). A site adds its own with the `neighbours` option, or passes [] to act beside anyone.
KNOWN: Tuple[Marker, ...] = (
    # NVSentinel's state label (quarantined, draining, remediating, ...) and its quarantine annotation.
    Marker("NVSentinel", "label", "dgxc.nvidia.com/nvsentinel-state"),
    Marker("NVSentinel", "annotation", "quarantineHealthEvent"),
    # draino's condition on a node it has cordoned and scheduled for a drain.
    Marker("draino", "condition", "DrainScheduled"),
)


def parse(raw: Optional[Sequence[Mapping[str, Any]]], field: str = "neighbours") -> Tuple[Marker, ...]:
    """The markers of the `neighbours` option: None is KNOWN; each entry names its owner and one of
    label, taint, annotation or condition (with an optional value). A bad entry names its field."""
    if raw is None:
        return KNOWN
    if not isinstance(raw, (list, tuple)):
        raise FieldError(field, "must be a list of {owner, label|taint|annotation|condition[, value]}")
    markers = []
    for index, entry in enumerate(raw):
        where = "%s[%d]" % (field, index)
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping with owner and one of %s" % ", ".join(KINDS))
        unknown = sorted(set(entry) - set(KINDS) - {"owner", "value"})
        if unknown:
            raise FieldError("%s.%s" % (where, unknown[0]),
                             "is not a marker field (owner, value, %s)" % ", ".join(KINDS))
        kinds = [kind for kind in KINDS if entry.get(kind) is not None]
        if len(kinds) != 1:
            raise FieldError(where, "must have exactly one of %s, got %s" % (", ".join(KINDS), kinds or "none"))
        owner = check_text(entry.get("owner"), "%s.owner" % where, 63)
        key = check_text(entry[kinds[0]], "%s.%s" % (where, kinds[0]), 317)
        value = entry.get("value")
        value = None if value is None else check_text(str(value), where + ".value", 63)
        markers.append(Marker(owner, kinds[0], key, value))
    return tuple(markers)


def found_on(node: Mapping[str, Any], markers: Sequence[Marker]) -> List[str]:
    """'<owner>: <kind> <key>[=<value>]' for each marker present on `node` (a Node as a dict, as the
    API server serialises it)."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    present: Dict[str, Dict[str, str]] = {
        "label": dict(metadata.get("labels") or {}),
        "annotation": dict(metadata.get("annotations") or {}),
        "taint": {taint.get("key"): taint.get("value") or "" for taint in spec.get("taints") or []},
        "condition": {condition.get("type"): condition.get("status") for condition in status.get("conditions") or []},
    }
    found = []
    for marker in markers:
        values = present[marker.kind]
        if marker.key not in values:
            continue
        wanted = marker.value if marker.value is not None else ("True" if marker.kind == "condition" else None)
        if wanted is None or values[marker.key] == wanted:
            found.append("%s: %s %s=%s" % (marker.owner, marker.kind, marker.key, values[marker.key]))
    return found
