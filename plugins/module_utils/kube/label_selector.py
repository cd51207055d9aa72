# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Kubernetes label selectors (metav1.LabelSelector) as plain data: match and describe.

Pure: no client. The Prometheus Operator's selectors are LabelSelectors; where the Operator gives
a null selector a meaning of its own (nothing, or the own namespace), the caller decides.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(GpufleetError):
    """A selector that is not a LabelSelector (an unknown operator, values where none belong)."""


def matches(selector: Mapping[str, Any], labels: Optional[Mapping[str, str]]) -> bool:
    """True if `labels` satisfy every term of `selector` ({} matches everything)."""
    labels = labels or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(term, labels) for term in selector.get("matchExpressions") or [])


def _expression_matches(term: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = term.get("key"), term.get("operator"), term.get("values") or []
    if operator not in OPERATORS:
        raise SelectorError("matchExpressions: operator %r of key %r is not one of %s"
                            % (operator, key, ", ".join(OPERATORS)))
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    return key not in labels


def describe(selector: Optional[Mapping[str, Any]]) -> str:
    """The selector in kubectl's `-l` syntax; `null` and `{}` (everything) spelled out."""
    if selector is None:
        return "null"
    terms: List[str] = ["%s=%s" % item for item in sorted((selector.get("matchLabels") or {}).items())]
    for term in selector.get("matchExpressions") or []:
        key, operator, values = term.get("key"), term.get("operator"), term.get("values") or []
        if operator == "Exists":
            terms.append(str(key))
        elif operator == "DoesNotExist":
            terms.append("!%s" % key)
        else:
            terms.append("%s %s (%s)" % (key, "in" if operator == "In" else "notin", ",".join(values)))
    return ",".join(terms) if terms else "{} (everything)"


def labels_that_would_match(selector: Mapping[str, Any]) -> Dict[str, str]:
    """The labels that satisfy the selector's matchLabels and its single-valued `In` terms: what to
    add to an object so that the selector picks it (empty where that takes more than labels)."""
    wanted = dict(selector.get("matchLabels") or {})
    for term in selector.get("matchExpressions") or []:
        if term.get("operator") == "In" and len(term.get("values") or []) == 1:
            wanted[term["key"]] = term["values"][0]
    return wanted
