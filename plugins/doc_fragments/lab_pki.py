# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment:
    # The lab's keys and certificates, as lab_pki_info reads them and lab_pki issues them
    # (module_utils/lab/pki.py ARGUMENT_SPEC).
    DOCUMENTATION = r"""
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
        description: The subject's CN; required unless O(certificates[].read_only).
        type: str
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
      read_only:
        description:
          - The entry is made elsewhere (another role's CA) and only read, as the issuer of the entries that
            name it; its key and certificate are never written.
          - Its key and certificate must load, match, be a CA and be valid now (its subject and usages are
            not compared); otherwise M(gpufleet.resilience.lab_pki) fails and writes nothing, and in check
            mode reports what it signs as to be issued.
        type: bool
        default: false
  key_pairs:
    description:
      - Keys with no certificate, each with its public half in a file of its own (the API server's
        service-account signing key). The key is made when it is missing, unreadable, of another mode or
        not an ECDSA P-256 key; the public file (mode 0644, PEM) is written when it is missing, of another
        mode or not the key's public half.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Name of the entry, as the results list it; not the name of a certificate too.
        type: str
        required: true
      key:
        description: Path of the private key.
        type: path
        required: true
      public:
        description: Path of the public key.
        type: path
        required: true
  min_days:
    description: A certificate valid for fewer days than this is issued again.
    type: float
    default: 30
requirements:
  - cryptography
"""
