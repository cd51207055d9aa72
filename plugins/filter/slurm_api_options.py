# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: slurm_api_options
short_description: A role's Slurm settings as the options of the gpufleet.resilience.slurm_api doc fragment
version_added: 0.6.0
description:
  - Turns a role's C(<prefix>_slurm_api) and C(<prefix>_slurm_rest) (the C(rest_*) options without their
    prefix, as an inventory writes them) into module options - V(cli) gives C(slurm_conf) and the commands'
    directory, V(rest) gives C(rest_url), C(rest_jwt_key_file) and the rest.
  - An unknown key of C(<prefix>_slurm_rest), or an api other than V(cli) and V(rest), fails naming the
    variable and the key, before any module runs.
  - Unset options are null, which the modules take as not given.
  - Pure; no I/O.
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: V(cli) or V(rest) (C(<prefix>_slurm_api)).
    type: str
    required: true
  rest:
    description: C(<prefix>_slurm_rest) - url, user, jwt_key_file, token_file, token_lifespan, ca_file,
      validate_certs, allow_http, requeue_exit. Ignored with V(cli).
    type: dict
    default: {}
  slurm_conf:
    description: V(cli) - C(slurm.conf) of the commands; empty for Slurm's default.
    type: str
    default: ""
  bin_dir:
    description: V(cli) - the directory of the Slurm commands; empty for the PATH.
    type: str
    default: ""
  prefix:
    description: The role's variable prefix, for the errors (C(remediation), C(chaos_drill)).
    type: str
    default: slurm
  bin_dir_option:
    description: The name the modules give the commands' directory (C(bin_dir); the chaos modules' C(slurm_bin_dir)).
    type: str
    default: bin_dir
"""

EXAMPLES = r"""
- name: The remediation's Slurm options
  ansible.builtin.set_fact:
    slurm_options: >-
      {{ remediation_slurm_api | gpufleet.resilience.slurm_api_options(remediation_slurm_rest,
           remediation_slurm_conf, remediation_slurm_bin_dir, prefix='remediation') }}
"""

RETURN = r"""
_value:
  description: The module options, for example C(slurm_api), C(rest_url) and C(rest_jwt_key_file).
  type: dict
"""

from typing import Any, Dict, Mapping, Optional

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS

# The rest_* options of the fragment, without their prefix: what <prefix>_slurm_rest takes.
REST_KEYS = tuple(name[len("rest_"):] for name in SLURM_API_ARGS if name.startswith("rest_"))


def slurm_api_options(api: Any, rest: Optional[Mapping[str, Any]] = None, slurm_conf: Any = "", bin_dir: Any = "",
                      prefix: str = "slurm", bin_dir_option: str = "bin_dir") -> Dict[str, Any]:
    if api not in ("cli", "rest"):
        raise AnsibleFilterError("%s_slurm_api must be cli or rest, not %r" % (prefix, api))
    if api == "cli":
        return {"slurm_api": "cli", "slurm_conf": slurm_conf or None, bin_dir_option: bin_dir or None}
    if rest is None or rest == "":
        rest = {}
    if not isinstance(rest, Mapping):
        raise AnsibleFilterError("%s_slurm_rest must be a dict of %s, not %r" % (prefix, ", ".join(REST_KEYS), rest))
    unknown = sorted(str(key) for key in rest if key not in REST_KEYS)
    if unknown:
        raise AnsibleFilterError("%s_slurm_rest takes only %s, not %s" % (prefix, ", ".join(REST_KEYS),
                                                                          ", ".join(unknown)))
    options: Dict[str, Any] = {"slurm_api": "rest"}
    options.update({"rest_" + key: value for key, value in rest.items()})
    return options


class FilterModule:
    def filters(self) -> Dict[str, Any]:
        return {"slurm_api_options": slurm_api_options}
