#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_pki_info
short_description: Say which of the lab's keys and certificates must be (re)issued
version_added: 0.5.0
description:
  - Reads every key and certificate of O(certificates) in one module run and returns the names
    whose key must be made and whose certificate must be issued, with the reason for each; the
    lab roles then run the community.crypto steps (key, CSR, signature) for those alone, instead
    of a module run per certificate and step on every rerun.
  - A certificate is current when its file (mode 0644) and its key's file (mode 0600) are there,
    the key is an ECDSA P-256 key, the certificate holds that key's public half, is signed by
    O(certificates[].issuer) (or by itself), has the wanted subject, SANs, key usages and CA flag,
    is valid now and for O(min_days) more. A stale key or a stale issuer makes the certificate stale.
  - Never writes anything and never returns key material.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.lab_pki
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Find the lab certificates to issue
  gpufleet.resilience.lab_pki_info:
    certificates:
      - {name: ca, key: /lab/kube/ca.key, cert: /lab/kube/ca.crt, common_name: gpufleet-lab-ca, ca: true,
         key_usage: [keyCertSign, cRLSign, digitalSignature]}
      - {name: apiserver, key: /lab/kube/apiserver.key, cert: /lab/kube/apiserver.crt, common_name: kube-apiserver,
         san: ["IP:127.0.0.1", "DNS:localhost"], extended_usage: [serverAuth], issuer: ca}
  register: lab_pki
"""

RETURN = r"""
keys:
  description: Names whose private key must be made (missing, unreadable, another type, wrong mode).
  returned: success
  type: list
  elements: str
  sample: [apiserver]
certificates:
  description: Names whose certificate must be issued (including those whose key or issuer is made again).
  returned: success
  type: list
  elements: str
  sample: [apiserver, admin]
public_keys:
  description:
    - Names of O(key_pairs) whose public key must be written (missing, another mode, not the key's public half,
      or its key made again).
  returned: success
  type: list
  elements: str
  sample: [service-account]
reasons:
  description: Why, per name in O(certificates) or O(key_pairs).
  returned: success
  type: dict
  sample: {apiserver: "certificate /lab/kube/apiserver.crt has SANs ['DNS:localhost'], not ['DNS:localhost', 'IP:::1']"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.pki import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True), write=False)


if __name__ == "__main__":
    main()
