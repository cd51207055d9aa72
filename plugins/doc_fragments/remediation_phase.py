# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The progress option of the modules that do a phase of a remediation (module_utils/remediation/phase_record.py)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  progress:
    description:
      - Record this module's work as a phase of a remediation started by M(gpufleet.resilience.remediation_start),
        in the same module run, once the work is done (what M(gpufleet.resilience.remediation_progress) would
        do in a run of its own).
      - The phase's outcome (what the module returns that the audit record keeps) is stored in the
        remediation's progress; a rerun of the remediation does not run a phase recorded as done.
      - Omitted, the module records nothing.
    type: dict
    suboptions:
      remediation_id:
        description: The id RV(gpufleet.resilience.remediation_start#module:id) returned.
        type: str
        required: true
      phase:
        description: The phase this module's work is.
        type: str
        required: true
        choices: [fence, quarantine, notify, jobs, down, opt_out, drain, evidence, reset_gpu, restart_fm, verify,
                  validate, resume, replace, admit, hold, record]
      outcome:
        description: More outcome to store with the module's own (what an earlier task of the same phase did).
        type: dict
        default: {}
      namespace:
        description: Namespace of the remediation's state ConfigMaps.
        type: str
        default: gpufleet-system
      kubeconfig:
        description: Kubeconfig of the cluster that holds the state; omit for the in-cluster service account.
        type: path
      context:
        description: Kubeconfig context.
        type: str
"""
