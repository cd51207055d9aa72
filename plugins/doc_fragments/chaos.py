# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The connection options every chaos module shares: where the ledger, Kubernetes, Slurm and the lab are."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Kubeconfig file; omit for the in-cluster service account.
      - Without Kubernetes (bare metal) give O(ledger_file); targets then opt in through the inventory
        (M(gpufleet.resilience.chaos_gate) option C(allowed_nodes)).
    type: path
  context:
    description: Kubeconfig context.
    type: str
  namespace:
    description: Namespace of the chaos ledger ConfigMap and of the remediation's breaker.
    type: str
    default: gpufleet-system
  ledger_file:
    description:
      - A JSON state file on the control host that holds the chaos ledger instead of the ConfigMap
        C(gpufleet-chaos-ledger) (bare metal).
    type: path
  lab_dir:
    description:
      - The lab's directory; set, the GPU backends write the lab's fake NVML state and each node's own
        kernel-log file. Unset means a real site.
    type: path
  slurm_conf:
    description: slurm.conf of the cluster, for Slurm reads and the Slurm-based backends.
    type: path
  slurm_bin_dir:
    description: Directory of the Slurm commands when they are not on the PATH.
    type: path
"""
