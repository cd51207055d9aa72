# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: xid_info
short_description: Look an XID up in NVIDIA's XID catalog
version_added: 0.1.0
description:
  - Returns the catalog entry of an XID number, with its name, description, severity, immediate and
    investigatory action.
  - The catalog ships with the collection (no I/O); its version is in the result.
  - An XID the catalog does not know gets the safe default V(CONTACT_SUPPORT) and RV(_value.unknown=true).
  - Context rules (XID 45 solo, XID 48 with 63/64, XID 154's text) need the other events and are
    applied by M(gpufleet.resilience.gpu_health), not by this filter.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The XID number (an integer, or a string of digits).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: What does XID 79 need?
  ansible.builtin.debug:
    msg: "{{ 79 | gpufleet.resilience.xid_info }}"
  # -> {"xid": 79, "name": "GPU_HAS_FALLEN_OFF_THE_BUS", "action": "RESTART_BM", "severity": "fatal", ...}

- name: Actions of the XIDs seen on a node
  ansible.builtin.debug:
    msg: "{{ [48, 63, 13] | map('gpufleet.resilience.xid_info') | map(attribute='action') }}"
"""

RETURN = r"""
_value:
  description: The catalog entry.
  type: dict
  contains:
    xid:
      description: The XID number.
      type: int
    name:
      description: Catalog mnemonic.
      type: str
    description:
      description: What the XID means.
      type: str
    severity:
      description: V(fatal) or V(non-fatal).
      type: str
    action:
      description:
        - Immediate action, one of V(IGNORE), V(RESTART_APP), V(RESET_GPU), V(DRAIN_AND_RESET),
          V(RESTART_BM), V(RESTART_VM), V(CONTACT_SUPPORT), V(DECODE).
      type: str
    immediate_bucket:
      description: The catalog's own words for the immediate action.
      type: str
    investigatory_action:
      description: The catalog's investigatory action.
      type: str
    applies_to:
      description: GPU products the catalog lists for this XID.
      type: list
      elements: str
    unknown:
      description: True when the catalog does not know this XID.
      type: bool
    catalog_version:
      description: Version of the shipped catalog.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_lookup import XidLookupError, xid_info


def xid_info_filter(value):
    try:
        return xid_info(value)
    except XidLookupError as exc:
        raise AnsibleFilterError("xid_info: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"xid_info": xid_info_filter}
