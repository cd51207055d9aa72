# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Files of the variability baseline, under one directory (``state_dir``):

* ``baseline.json`` - the last baseline: every node's per-GPU figures, class and score.
* ``placement.json`` - what publishing replaced, per node: Slurm Weight and features, the
  Kubernetes label and annotation values (null: there was none). Written *before* anything is
  published, kept across reruns (the first value is the one to restore), and removed by the revert.

Both are written atomically (files.write_atomic), so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from ansible_collections.gpufleet.resilience.plugins.module_utils.files import write_atomic

BASELINE = "baseline.json"
PLACEMENT = "placement.json"


def load(state_dir: str, name: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(state_dir, name), encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return {}


def store(state_dir: str, name: str, data: Dict[str, Any]) -> bool:
    """Write ``data`` unless the file already holds it; True when it wrote."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    path = os.path.join(state_dir, name)
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return False
    except FileNotFoundError:
        os.makedirs(state_dir, exist_ok=True)
    write_atomic(path, text.encode("utf-8"))
    return True


def remove(state_dir: str, name: str) -> bool:
    try:
        os.unlink(os.path.join(state_dir, name))
    except FileNotFoundError:
        return False
    return True
