# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The option every plugin that reads GPU node pools shares."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  variable:
    description:
      - Name of the variable the pools came from, used in error messages, so that they name the
        field as the user wrote it (C(gpufleet_node_pools[1].count)).
    type: str
    default: gpufleet_node_pools
"""
