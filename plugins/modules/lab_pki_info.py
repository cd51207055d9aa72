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
options:
  certificates:
    description: The wanted keys and certificates, each CA before the certificates it signs.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Name of the entry, as the results list it.
        type: str
        required: true
      key:
        description: Path of the private key.
        type: path
        required: true
      cert:
        description: Path of the certificate.
        type: path
        required: true
      common_name:
        description: The subject's CN.
        type: str
        required: true
      organization:
        description: The subject's O, if any.
        type: str
      san:
        description: Subject alternative names, as V(DNS:name) or V(IP:address).
        type: list
        elements: str
        default: []
      extended_usage:
        description: Extended key usages (V(serverAuth), V(clientAuth)).
        type: list
        elements: str
        default: []
      key_usage:
        description:
          - Key usages the certificate must have (V(digitalSignature), V(keyEncipherment), V(keyCertSign),
            V(cRLSign)).
        type: list
        elements: str
        default: []
      ca:
        description: Whether it is a CA certificate.
        type: bool
        default: false
      issuer:
        description: O(certificates[].name) of the CA that signs it; none for a self-signed one.
        type: str
  min_days:
    description: A certificate valid for fewer days than this is issued again.
    type: float
    default: 30
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
requirements:
  - cryptography
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
reasons:
  description: Why, per name in O(certificates).
  returned: success
  type: dict
  sample: {apiserver: "certificate /lab/kube/apiserver.crt has SANs ['DNS:localhost'], not ['DNS:localhost', 'IP:::1']"}
"""

import math

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.pki import assess, parse

try:
    import cryptography  # noqa: F401  pylint: disable=unused-import
    HAS_CRYPTOGRAPHY = True
except ImportError:
    HAS_CRYPTOGRAPHY = False


def argspec():
    return dict(
        certificates=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            key=dict(type="path", required=True, no_log=False),
            cert=dict(type="path", required=True),
            common_name=dict(type="str", required=True),
            organization=dict(type="str"),
            san=dict(type="list", elements="str", default=[]),
            extended_usage=dict(type="list", elements="str", default=[]),
            key_usage=dict(type="list", elements="str", default=[]),
            ca=dict(type="bool", default=False),
            issuer=dict(type="str"),
        )),
        min_days=dict(type="float", default=30),
    )


def main():
    module = AnsibleModule(argument_spec=argspec(), supports_check_mode=True)
    if not HAS_CRYPTOGRAPHY:
        module.fail_json(msg=missing_required_lib("cryptography"))
    min_days = module.params["min_days"]
    if not math.isfinite(min_days) or not 0 <= min_days <= 36500:
        module.fail_json(msg="min_days: must be a number of days from 0 to 36500, got %r" % min_days)
    try:
        found = assess(parse(module.params["certificates"]), min_days)
    except FieldError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
