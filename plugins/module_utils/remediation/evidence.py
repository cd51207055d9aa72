# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The evidence bundle of a remediation: what an engineer or the vendor's support will ask for,
collected before the node is reset, replaced or held.

One directory per remediation, ``<dest>/<remediation id>/``, with a ``manifest.json`` that lists each
part (name, bytes, sha256, whether it was cut) and each part that could not be had, with why:

* ``slurm.json`` - the Slurm node record and the jobs on the node (through the remediation's client);
* ``kubernetes.json`` - the Node (conditions, labels, taints, annotations) and its Events;
* ``agent-metrics.txt`` - the health agent's metrics page: the node's GPUs as NVML showed the agent;
* ``agent-journal.jsonl`` and ``kernel.log`` - the end of the agent's event journal and of the
  kernel log it follows (files on the host that runs this: the lab, or the node itself);
* ``nvidia-bug-report.log.gz`` - NVIDIA's own report, where ``nvidia-bug-report.sh`` is on the PATH.

Every part is capped (the end is kept: the fault is recent), and so is the bundle; the oldest
bundles beyond ``keep`` are removed. The bundle is written under a temporary name and renamed when
complete, so a reader never sees half of one, and a rerun after a crash finds the finished bundle
and collects nothing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

MANIFEST = "manifest.json"
SCHEMA = 1
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
BUG_REPORT = "nvidia-bug-report.sh"
BUG_REPORT_TIMEOUT = 300


@dataclass(frozen=True)
class Limits:
    part_bytes: int = 4 * 1024 * 1024
    bundle_bytes: int = 16 * 1024 * 1024
    keep: int = 50


# A part's source: returns its bytes, or raises OSError/GpufleetError/ValueError saying why not.
Source = Callable[[], bytes]


def check_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value) or value in (".", ".."):
        raise FieldError(field, "must be letters, digits, '.', '_' and '-' (a file name), not %r" % (value,))
    return value


def as_json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")


def bug_report(workdir: str, run: Callable[..., Any] = subprocess.run) -> bytes:
    """NVIDIA's report, run here (the node itself): ``--output-file`` in a scratch directory."""
    script = shutil.which(BUG_REPORT)
    if not script:
        raise FileNotFoundError("%s is not on the PATH of this host (%s): run the phase on the node to have it"
                                % (BUG_REPORT, socket.gethostname()))
    base = os.path.join(workdir, "nvidia-bug-report")
    done = run([script, "--output-file", base + ".log"], capture_output=True, timeout=BUG_REPORT_TIMEOUT,
               check=False)
    if getattr(done, "returncode", 1) != 0:
        raise OSError("%s exited %s" % (BUG_REPORT, getattr(done, "returncode", "?")))
    with open(base + ".log.gz", "rb") as handle:
        return handle.read()


def collect(dest: str, remediation_id: str, node: str, sources: Mapping[str, Source], limits: Limits,
            check_mode: bool = False, clock: Callable[[], float] = time.time) -> Dict[str, Any]:
    """Collect the bundle of ``remediation_id`` into ``dest`` (``sources``: part name -> source, in
    order). Returns {changed, path, manifest}; a bundle already there is returned as it is."""
    check_id(remediation_id, "remediation_id")
    check_id(node, "node")
    path = os.path.join(dest, remediation_id)
    existing = read_manifest(path)
    if existing is not None:
        return {"changed": False, "path": path, "manifest": existing}
    if check_mode:
        return {"changed": True, "path": path,
                "manifest": {"parts": [], "missing": [], "would_collect": list(sources)}}
    partial = path + ".partial"
    try:
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial, mode=0o700)
        manifest = _fill(partial, remediation_id, node, sources, limits, clock)
        with open(os.path.join(partial, MANIFEST), "wb") as handle:
            handle.write(as_json(manifest))
        os.rename(partial, path)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise FieldError("dest", "cannot write the evidence bundle under %s: %s" % (dest, exc)) from exc
    manifest["removed"] = prune(dest, limits.keep, keep_path=path)
    return {"changed": True, "path": path, "manifest": manifest}


def _fill(workdir: str, remediation_id: str, node: str, sources: Mapping[str, Source], limits: Limits,
          clock: Callable[[], float]) -> Dict[str, Any]:
    parts: List[Dict[str, Any]] = []
    missing: List[Dict[str, str]] = []
    budget = limits.bundle_bytes
    for name, source in sources.items():
        try:
            data = source()
        except Exception as exc:  # one part's failure must not cost the others: it is named instead
            missing.append({"part": name, "why": str(exc) or type(exc).__name__})
            continue
        cap = min(limits.part_bytes, budget)
        cut = len(data) > cap
        if cut:
            data = data[-cap:] if cap else b""
        if not data and cut:
            missing.append({"part": name, "why": "the bundle's cap of %d bytes was reached" % limits.bundle_bytes})
            continue
        with open(os.path.join(workdir, name), "wb") as handle:
            handle.write(data)
        budget -= len(data)
        parts.append({"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "cut": cut})
    return {"schema": SCHEMA, "remediation_id": remediation_id, "node": node, "collected_at": clock(),
            "host": socket.gethostname(), "parts": parts, "missing": missing,
            "bytes": sum(part["bytes"] for part in parts)}


def read_manifest(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(path, MANIFEST), encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def prune(dest: str, keep: int, keep_path: str) -> List[str]:
    """Remove the oldest finished bundles beyond ``keep`` (never ``keep_path``); their names."""
    bundles: List[Tuple[float, str]] = []
    for name in os.listdir(dest):
        path = os.path.join(dest, name)
        manifest = read_manifest(path) if os.path.isdir(path) else None
        if manifest is not None and path != keep_path:
            bundles.append((float(manifest.get("collected_at") or 0), path))
    bundles.sort()
    extra = len(bundles) + 1 - max(1, keep)
    removed = []
    for _at, path in bundles[:max(0, extra)]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(os.path.basename(path))
    return removed
