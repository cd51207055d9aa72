# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Argument specs shared by the health modules (mirrors doc_fragments/nvml.py)."""

from __future__ import annotations

import copy

NVML_ARG_SPEC = dict(
    library_path=dict(type="path"),
)


def with_nvml_args(spec: dict) -> dict:
    merged = copy.deepcopy(NVML_ARG_SPEC)
    merged.update(spec)
    return merged
