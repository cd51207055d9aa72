#!/usr/bin/python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE); modules are also offered under the
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: Apache-2.0 OR GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_pki
short_description: Make the lab's keys and certificates that are missing or stale, in one module run
version_added: 0.6.0
description:
  - Reads every key and certificate of O(certificates) as M(gpufleet.resilience.lab_pki_info) does, then makes
    the keys and issues the certificates that are missing or stale, in the order given (each CA before what it
    signs), and nothing else. A CA issued again issues again all that it signed.
  - What it writes is what the lab roles asked of community.crypto before, made with the same library
    (C(cryptography)) - an ECDSA P-256 key (mode 0600, written under its final mode and renamed into place);
    a certificate (mode 0644) valid from now for 3650 days, signed with ECDSA-SHA256, with the wanted subject,
    SANs, key usages (critical for a CA) and CA flag, a subject key identifier and its CA's authority key
    identifier.
  - One module run instead of one per key, CSR and signature - about 30 runs and 20 s of CPU for a new lab's
    control plane.
  - Lab only - a real cluster's PKI is its own.
author: gpufleet.resilience contributors (@gpufleet)
extends_documentation_fragment:
  - gpufleet.resilience.lab_pki
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - Says which keys and certificates it would make; writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
seealso:
  - module: gpufleet.resilience.lab_pki_info
"""

EXAMPLES = r"""
- name: Issue the lab's keys and certificates that are missing or stale
  gpufleet.resilience.lab_pki:
    certificates:
      - {name: ca, key: /lab/kube/ca.key, cert: /lab/kube/ca.crt, common_name: gpufleet-lab-ca, ca: true,
         key_usage: [keyCertSign, cRLSign, digitalSignature]}
      - {name: apiserver, key: /lab/kube/apiserver.key, cert: /lab/kube/apiserver.crt, common_name: kube-apiserver,
         san: ["IP:127.0.0.1", "DNS:localhost"], extended_usage: [serverAuth], issuer: ca}
"""

RETURN = r"""
keys:
  description: Names whose private key was made (in check mode, would be).
  returned: success
  type: list
  elements: str
  sample: [apiserver]
certificates:
  description: Names whose certificate was issued (in check mode, would be).
  returned: success
  type: list
  elements: str
  sample: [apiserver, admin]
public_keys:
  description:
    - Names of O(key_pairs) whose public key was written, in check mode would be (missing, another mode,
      not the key's public half, or its key made again).
  returned: success
  type: list
  elements: str
  sample: [service-account]
reasons:
  description: Why, per name in RV(certificates) or RV(public_keys).
  returned: success
  type: dict
  sample: {apiserver: "certificate /lab/kube/apiserver.crt is missing"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.pki import ARGUMENT_SPEC, run_module


def main():
    run_module(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True), write=True)


if __name__ == "__main__":
    main()
