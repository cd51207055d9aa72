# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The connection options every chaos module shares: where the ledger, Kubernetes, Slurm and the lab are."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of the kubeconfig. Not given - E(K8S_AUTH_KUBECONFIG); else, unless O(host) and O(api_key)
        are set, the in-cluster service account inside a Pod.
      - With no O(kubeconfig), O(context) or O(host) (nor their E(K8S_AUTH_*) variables) and outside a
        Pod, there is no Kubernetes (bare metal; a shell's E(KUBECONFIG) alone does not count). Give
        O(ledger_file) then; targets opt in through the inventory (M(gpufleet.resilience.chaos_gate)
        option C(allowed_nodes)).
    type: path
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
    description:
      - O(slurm_api=cli) - slurm.conf of the cluster, for Slurm reads and the Slurm-based backends.
      - Neither this nor O(slurm_api=rest) given - no Slurm is read (steady state and the probes skip it).
    type: path
  slurm_bin_dir:
    description: O(slurm_api=cli) - directory of the Slurm commands when they are not on the PATH.
    type: path
"""
