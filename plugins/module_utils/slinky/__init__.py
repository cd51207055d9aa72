# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Values for SchedMD's Slinky slurm-operator charts, generated from the inventory."""

from __future__ import annotations
