# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What the gpu_variability module does: measurements -> figures -> classes -> baseline -> publish.

A node whose figures cannot be had (gpu-burn calls a GPU FAULTY, a lab GPU is lost, no figures in
the output) is *skipped*, with the reason: it keeps whatever placement it has, and the others are
still classified. Malformed input (a wrong type, an unknown format) is a FieldError naming the
field, before anything is read or written.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import check_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability import figures, record
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.classes import (
    Measurement,
    check_figures,
    check_thresholds,
    check_weight_offsets,
    classify,
    pool_of,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.lab_figures import lab_figures
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability.publish import Publisher

FORMATS = ("gpu_burn", "dcgmi_diag", "figures", "lab")


def check_measurements(measurements: Any, lab_gpu_dir: Optional[str]) -> List[Dict[str, Any]]:
    """Every entry well formed (node, pool, format and what that format needs); nothing is read yet."""
    if not isinstance(measurements, Sequence) or isinstance(measurements, str) or not measurements:
        raise FieldError("measurements", "must be a non-empty list")
    checked = []
    for index, entry in enumerate(measurements):
        where = "measurements[%d]" % index
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping with node and format")
        unknown = sorted(set(entry) - {"node", "pool", "format", "output", "figures"})
        if unknown:
            raise FieldError("%s.%s" % (where, unknown[0]), "unknown key; use node, pool, format, output, figures")
        node = check_node(entry.get("node"), "%s.node" % where)
        fmt = entry.get("format", "lab")
        if fmt not in FORMATS:
            raise FieldError("%s.format" % where, "must be one of %s, not %r" % (", ".join(FORMATS), fmt))
        if fmt in ("gpu_burn", "dcgmi_diag") and not isinstance(entry.get("output"), str):
            raise FieldError("%s.output" % where, "format %s needs the tool's output as a string" % fmt)
        if fmt == "figures":
            check_figures(entry.get("figures"), "%s.figures" % where)
        if fmt == "lab" and not lab_gpu_dir:
            raise FieldError("lab_gpu_dir", "is required by format lab (%s)" % where)
        pool = entry.get("pool") or pool_of(node)
        if not isinstance(pool, str):
            raise FieldError("%s.pool" % where, "must be a string")
        checked.append(dict(entry, node=node, pool=pool, format=fmt))
    return checked


def measure(entry: Mapping[str, Any], index: int, lab_gpu_dir: Optional[str], write: bool) -> Dict[int, float]:
    where = "measurements[%d]" % index
    if entry["format"] == "gpu_burn":
        return figures.gpu_burn_figures(entry["output"], "%s.output" % where)
    if entry["format"] == "dcgmi_diag":
        return figures.dcgmi_diag_figures(entry["output"], "%s.output" % where)
    if entry["format"] == "figures":
        return check_figures(entry["figures"], "%s.figures" % where)
    return lab_figures(lab_gpu_dir or "", entry["node"], write=write)  # check_measurements required it


def present(publisher: Publisher, measurements: Any, lab_gpu_dir: Optional[str] = None,
            thresholds: Optional[Mapping[str, Any]] = None, weight_offsets: Optional[Mapping[str, Any]] = None,
            dry_run: bool = False) -> Dict[str, Any]:
    """Classify and (unless ``dry_run``: the baseline is recorded, nothing is published) publish."""
    limits = check_thresholds(thresholds)
    offsets = check_weight_offsets(weight_offsets)
    entries = check_measurements(measurements, lab_gpu_dir)
    measured: List[Measurement] = []
    skipped: List[Dict[str, str]] = []
    for index, entry in enumerate(entries):
        try:
            gpus = measure(entry, index, lab_gpu_dir, write=not publisher.check_mode)
        except GpufleetError as exc:
            if isinstance(exc, FieldError) and entry["format"] not in ("gpu_burn", "dcgmi_diag"):
                raise
            skipped.append({"node": entry["node"], "reason": str(exc)})
            continue
        measured.append(Measurement(entry["node"], entry["pool"], gpus))
    classes = classify(measured, limits) if measured else []
    gpus = {m.node: m.gpus for m in measured}
    baseline = {
        "thresholds": limits,
        "nodes": {item.node: dict(item.as_dict(), gpus={str(gpu): value for gpu, value in gpus[item.node].items()})
                  for item in classes},
        "skipped": skipped,
    }
    changed = False
    if not publisher.check_mode:
        changed = record.store(publisher.state_dir, record.BASELINE, baseline)
    published: Dict[str, Any] = {"nodes": [], "changed": False}
    if not dry_run and classes:
        published = publisher.publish(classes, offsets)
    by_node = {item["node"]: item for item in published["nodes"]}
    nodes = [dict(item.as_dict(), slurm=by_node.get(item.node, {}).get("slurm"),
                  kube=by_node.get(item.node, {}).get("kube")) for item in classes]
    return {"changed": changed or published["changed"], "nodes": nodes, "skipped": skipped,
            "thresholds": limits, "weight_offsets": offsets, "dry_run": dry_run}


def absent(publisher: Publisher) -> Dict[str, Any]:
    """Put back what the publish replaced (see publish.Publisher.revert)."""
    reverted = publisher.revert()
    return {"changed": reverted["changed"], "nodes": reverted["nodes"], "skipped": []}
