# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: drill_params
short_description: Keep only the knobs an experiment declares
version_added: 0.6.0
description:
  - "C(playbooks/drill.yml) takes an experiment's knobs as plain variables (C(-e xid=79)). Variables of the same name
    from the inventory (C(path), C(mode), C(output), ...) must not slip into the drill: this keeps only the knobs the
    experiment's schema declares (C(module_utils/chaos/experiments.py)); the gate refuses any other key of C(params)
    by name and checks every value."
  - An unknown experiment gives an empty mapping; the gate then names the experiment.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: Candidate knobs, name to value.
    type: dict
    required: true
  experiment:
    description: The experiment.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The knobs of gpu_xid among the play's variables
  ansible.builtin.set_fact:
    knobs: "{{ {'xid': 79, 'path': '/etc/passwd'} | gpufleet.resilience.drill_params('gpu_xid') }}"  # {'xid': 79}
"""

RETURN = r"""
_value:
  description: The candidates the experiment declares.
  type: dict
"""

from typing import Any, Callable, Dict, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments


def drill_params(candidates: Mapping[str, Any], experiment: Any) -> Dict[str, Any]:
    if not isinstance(candidates, Mapping):
        raise AnsibleFilterError("drill_params: expects a mapping of knobs, got %s" % type(candidates).__name__)
    known = experiments.EXPERIMENTS.get(experiment) if isinstance(experiment, str) else None
    if known is None:
        return {}
    return {name: value for name, value in candidates.items() if name in known.knobs}


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"drill_params": drill_params}
