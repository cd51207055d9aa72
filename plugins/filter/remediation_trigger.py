# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: remediation_trigger
short_description: Decode the trigger the self-healing rulebook sends, as data
version_added: 0.6.0
description:
  - "The self-healing rulebook sends what started a remediation (alert labels and annotations, or
    the node condition) as one percent-encoded JSON string, C(remediation_trigger_encoded), so that
    no text of an alert or a condition reaches the playbook as a template (ansible-core loads extra
    vars as trusted templates). This filter turns it back into a dict, in Python: its strings are
    never templated afterwards."
  - "Fails naming the bad part: an unknown key, a C(source) other than V(alertmanager) or
    V(node_condition), text that is too long or holds control characters."
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The encoded trigger, as the rulebook renders it (C(trigger | tojson | urlencode)).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: What started this run
  ansible.builtin.set_fact:
    trigger: "{{ remediation_trigger_encoded | gpufleet.resilience.remediation_trigger }}"
"""

RETURN = r"""
_value:
  description: The trigger.
  type: dict
  sample:
    source: alertmanager
    alert: GpuNodeFatal
    fingerprint: 2c1f0a9e8b7d6c5f
    starts_at: "2026-12-01T03:00:01.2Z"
    received_at: "2026-12-01T03:00:02.0Z"
    labels: {alertname: GpuNodeFatal, node: gpu-a-003, component: gpufleet}
    annotations: {summary: "gpu-a-003: fatal GPU fault"}
"""

from typing import Any, Callable, Dict

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.trigger import decode


def remediation_trigger(encoded: Any) -> Dict[str, Any]:
    try:
        return decode(encoded)
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"remediation_trigger": remediation_trigger}
