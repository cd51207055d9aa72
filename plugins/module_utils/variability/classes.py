# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Variability classes: which nodes run a tightly coupled job at the pace of the pool (pure rules).

A synchronous job runs at the pace of its slowest GPU, so a node is ranked by its slowest GPU:
``score`` is how many percent that GPU is slower than the median GPU of the node's pool (negative:
faster). Classes, with the default thresholds (after PAL, SC'24, whose measured spread was a few
percent with a tail beyond ten):

* ``var_low``  - score <= 3 %
* ``var_mid``  - score <= 8 %
* ``var_high`` - slower still

The pool median, not a nominal figure, is the yardstick: it needs no per-product table, and a
pool that is uniformly slow (older clocks, a hot row) is still a pool of equals.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

CLASSES = ("var_low", "var_mid", "var_high")
DEFAULT_THRESHOLDS = {"var_low": 3.0, "var_mid": 8.0}
# Added to the node's own Weight (lower is preferred by Slurm): a site's relative weights survive,
# and the classes order the nodes on top of them.
DEFAULT_WEIGHT_OFFSETS = {"var_low": 0, "var_mid": 100, "var_high": 1000}
SLURM_MAX_WEIGHT = 2**32 - 2  # 22.05: INFINITE (2^32-1) means "never allocate"
LABEL = "gpufleet.io/variability-class"
SCORE_ANNOTATION = "gpufleet.io/variability-score"
_POOL_SUFFIX = re.compile(r"-\d+$")


@dataclass(frozen=True)
class Measurement:
    node: str
    pool: str
    gpus: Dict[int, float]  # GPU index -> figure (any unit, the same across the pool)


@dataclass(frozen=True)
class NodeClass:
    node: str
    pool: str
    cls: str
    score: float  # percent slower than the pool median GPU; rounded to 0.01
    slowest_gpu: int
    slowest: float
    pool_median: float

    def as_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "pool": self.pool, "class": self.cls, "score": self.score,
                "slowest_gpu": self.slowest_gpu, "slowest": self.slowest, "pool_median": self.pool_median}


def pool_of(node: str) -> str:
    """The lab's and the pool model's naming: gpu-a-003 is in pool gpu-a."""
    return _POOL_SUFFIX.sub("", node)


def check_thresholds(thresholds: Optional[Mapping[str, Any]]) -> Dict[str, float]:
    merged: Dict[str, Any] = dict(DEFAULT_THRESHOLDS)
    for key, value in (thresholds or {}).items():
        if key not in DEFAULT_THRESHOLDS:
            raise FieldError("thresholds.%s" % key, "unknown; thresholds are %s" % ", ".join(DEFAULT_THRESHOLDS))
        merged[key] = value
    for key, value in merged.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
            raise FieldError("thresholds.%s" % key, "must be a percentage in 0..100, not %r" % (value,))
    if merged["var_low"] > merged["var_mid"]:
        raise FieldError("thresholds.var_low", "must not exceed thresholds.var_mid (%s)" % merged["var_mid"])
    return {key: float(value) for key, value in merged.items()}


def check_weight_offsets(offsets: Optional[Mapping[str, Any]]) -> Dict[str, int]:
    merged: Dict[str, Any] = dict(DEFAULT_WEIGHT_OFFSETS)
    for key, value in (offsets or {}).items():
        if key not in CLASSES:
            raise FieldError("weight_offsets.%s" % key, "unknown class; classes are %s" % ", ".join(CLASSES))
        merged[key] = value
    for key, value in merged.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
            raise FieldError("weight_offsets.%s" % key, "must be an integer in 0..1000000, not %r" % (value,))
    if not merged["var_low"] <= merged["var_mid"] <= merged["var_high"]:
        raise FieldError("weight_offsets", "must not decrease from var_low to var_high: %r" % merged)
    return merged


def check_figures(gpus: Any, field: str) -> Dict[int, float]:
    """{index: figure} from a list (index = position) or a mapping; every figure finite and > 0."""
    if isinstance(gpus, Mapping):
        items = list(gpus.items())
    elif isinstance(gpus, Sequence) and not isinstance(gpus, str):
        items = list(enumerate(gpus))
    else:
        raise FieldError(field, "must be a list or a mapping of per-GPU figures, not %r" % (gpus,))
    if not items:
        raise FieldError(field, "has no GPU figures")
    figures: Dict[int, float] = {}
    for index, value in items:
        try:
            gpu = int(index)
        except (TypeError, ValueError):
            raise FieldError(field, "GPU index %r is not an integer" % (index,)) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise FieldError("%s[%s]" % (field, gpu), "must be a positive number, not %r" % (value,))
        figures[gpu] = float(value)
    return figures


def classify(measurements: Sequence[Measurement], thresholds: Optional[Mapping[str, float]] = None) -> List[NodeClass]:
    """Each node's class against its own pool's median GPU, in the order given."""
    limits = check_thresholds(thresholds)
    seen = set()
    by_pool: Dict[str, List[float]] = {}
    for measurement in measurements:
        if measurement.node in seen:
            raise FieldError("measurements", "node %s is measured twice" % measurement.node)
        seen.add(measurement.node)
        by_pool.setdefault(measurement.pool, []).extend(measurement.gpus.values())
    medians = {pool: statistics.median(values) for pool, values in by_pool.items()}
    result = []
    for measurement in measurements:
        median = medians[measurement.pool]
        gpu, slowest = min(measurement.gpus.items(), key=lambda item: (item[1], item[0]))
        score = round((median - slowest) / median * 100.0, 2)
        if score <= limits["var_low"]:
            cls = "var_low"
        elif score <= limits["var_mid"]:
            cls = "var_mid"
        else:
            cls = "var_high"
        result.append(NodeClass(measurement.node, measurement.pool, cls, score, gpu, slowest, median))
    return result


# -- Slurm: Weight and features --------------------------------------------------------------------

def merged_features(current: Sequence[str], cls: Optional[str]) -> Tuple[str, ...]:
    """The node's features without any class feature, plus ``cls`` (None: no class): others' are kept."""
    kept = tuple(feature for feature in current if feature not in CLASSES)
    return kept + ((cls,) if cls else ())


def class_weight(base_weight: Optional[int], cls: str, offsets: Mapping[str, int]) -> int:
    """The node's own weight (Slurm's default 1 when unknown) plus the class's offset, capped."""
    return min((base_weight or 1) + offsets[cls], SLURM_MAX_WEIGHT)


def slurm_target(node: Mapping[str, Any], base_weight: Optional[int], cls: Optional[str],
                 offsets: Mapping[str, int]) -> Dict[str, Any]:
    """Weight and features ``node`` (current weight, features, active_features) should have.

    ``cls`` None is the revert: the recorded weight, no class feature.
    """
    weight = base_weight if cls is None else class_weight(base_weight, cls, offsets)
    return {"weight": weight if weight is not None else node.get("weight"),
            "features": list(merged_features(node.get("features") or (), cls)),
            "active_features": list(merged_features(node.get("active_features") or (), cls))}


def slurm_differs(node: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    return any(list(node.get(key) or []) != list(target[key] or []) for key in ("features", "active_features")) \
        or node.get("weight") != target["weight"]


# -- Kubernetes: label and annotation --------------------------------------------------------------

def label_patch(node: Mapping[str, Any], label: Optional[str], score: Optional[str]) -> Dict[str, Any]:
    """The merge patch that gives a Node (as a dict) this class label and score annotation.

    None removes one. Nothing else on the node is touched. Empty when the node is as wanted; else it
    carries the resourceVersion it was computed from, so a concurrent write makes it a 409.
    """
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    patch: Dict[str, Any] = {}
    if labels.get(LABEL) != label:
        patch.setdefault("labels", {})[LABEL] = label
    if annotations.get(SCORE_ANNOTATION) != score:
        patch.setdefault("annotations", {})[SCORE_ANNOTATION] = score
    if not patch:
        return {}
    patch["resourceVersion"] = meta.get("resourceVersion")
    return {"metadata": patch}
