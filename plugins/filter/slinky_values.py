# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: slinky_values
short_description: Helm values for Slinky's slurm-operator and slurm charts, from the inventory
version_added: 0.1.0
description:
  - Builds the values of SchedMD's Slinky C(slurm-operator) and C(slurm) Helm charts (1.1.x or
    1.2.x, see O(chart_version)) from the GPU node pools, the login users and the shared storage
    claims. The pools are read with the collection's one pool model, so its rules apply.
  - One NodeSet per pool, named after the pool, with C(replicas=count), C(Gres=gpu:<gpus_per_node>)
    in the slurmd configuration, a request and limit of C(nvidia.com/gpu), a node selector on
    C(gpufleet.io/pool=<name>), the tolerations (the common ones, the pool's own, and one for each
    taint of the pool), and the home and checkpoint claims mounted. For 1.1.x each NodeSet and the
    LoginSet also carry the chart's sample entry (images and all), which 1.1.x needs.
  - One LoginSet with the claims mounted; each user's keys come from a ConfigMap (see
    RV(_value.authorized_keys)), admins' keys also go to root's C(authorized_keys).
  - One partition holding every NodeSet. On 1.1.x the chart's sample NodeSet C(slinky) and
    partition C(all) are turned off.
  - The operator values keep the chart's CRD dependency off (the CRDs are their own release), set
    C(webhook.enabled) and C(certManager.enabled) from the options, and, on 1.2.x,
    C(propagatedNodeConditions) (1.1.x has no such value).
  - Refuses tolerations of C(node.kubernetes.io/unschedulable), of C(gpufleet.io/*) taints and of
    every taint, so that a Kubernetes cordon keeps meaning a Slurm drain.
  - "Fails with the bad field named, for example C(slurm_node_pools[1].name: duplicate pool name 'gpu-a')."
author: gpufleet.resilience contributors (@gpufleet)
options:
  _input:
    description: The GPU node pools, as in C(gpufleet_node_pools).
    type: list
    elements: dict
    required: true
  login_users:
    description:
      - Login users, each C({name, ssh_authorized_keys, admin}). C(ssh_authorized_keys) is a list
        of OpenSSH public key lines without options; C(admin=true) adds the keys to root's.
    type: list
    elements: dict
    required: true
  storage:
    description:
      - Shared storage, C({home_claim, checkpoints_claim, home_path, checkpoints_path}). The claims
        must exist in the Slurm namespace; the paths default to C(/home) and C(/checkpoints).
    type: dict
    required: true
  options:
    description:
      - C(cluster_name), C(partition_name), C(login_set_name), C(login_replicas),
        C(login_service_type) (V(ClusterIP), V(NodePort) or V(LoadBalancer)),
        C(propagated_node_conditions) (default V([GpuHealthy])), C(tolerations) (default tolerates
        C(nvidia.com/gpu:NoSchedule)), C(gres_conf) (default C(AutoDetect=nvidia)),
        C(slurm_conf) (extra C(slurm.conf) keys), C(extra_values) (merged last, Helm's rules),
        C(webhook) (default V(true)) and C(webhook_cert_manager) (default V(true)).
    type: dict
    default: {}
  keys_configmap:
    description: Name of the ConfigMap that holds the users' C(authorized_keys) files.
    type: str
    default: slurm-login-authorized-keys
  variables:
    description:
      - Names used in error messages, keys C(pools), C(login_users), C(storage), C(options),
        C(chart_version). A name that ends in C(_) is a prefix, so C(slurm_slinky_) makes
        C(slurm_slinky_tolerations).
    type: dict
    default: {}
  chart_version:
    description:
      - Version of the Slinky charts the values are for. Lines 1.1.x and 1.2.x are supported;
        anything else fails.
    type: str
    default: 1.2.1
"""

EXAMPLES = r"""
- name: Generate the chart values
  ansible.builtin.set_fact:
    slinky: >-
      {{ gpufleet_node_pools | gpufleet.resilience.slinky_values(
           login_users=[{'name': 'alice', 'ssh_authorized_keys': [lookup('file', 'alice.pub')]}],
           storage={'home_claim': 'slurm-home', 'checkpoints_claim': 'slurm-checkpoints'},
           options={'cluster_name': 'fleet', 'propagated_node_conditions': ['GpuHealthy']},
           chart_version='1.2.1') }}
  # slinky.slurm.nodesets['gpu-a'].replicas -> 8
  # slinky.operator.propagatedNodeConditions -> ['GpuHealthy']
"""

RETURN = r"""
_value:
  description: The values of both charts and the ConfigMap data of the users' keys.
  type: dict
  contains:
    operator:
      description: Values of the C(slurm-operator) chart.
      type: dict
      sample: {crds: {enabled: false}, webhook: {enabled: true}, certManager: {enabled: true},
               propagatedNodeConditions: [GpuHealthy]}
    slurm:
      description:
        - Values of the C(slurm) chart (C(clusterName), C(configFiles), C(controller), C(nodesets),
          C(loginsets), C(partitions)).
      type: dict
      sample: {clusterName: fleet, nodesets: {gpu-a: {replicas: 8, extraConfMap: {Gres: ["gpu:8"]}}}}
    authorized_keys:
      description: ConfigMap data, one C(authorized_keys) file per user name.
      type: dict
      sample: {alice: "ssh-ed25519 AAAAC3Nza... alice@lab\n"}
    chart:
      description:
        - The chart version, its line, the Slurm release of its default images and the oldest Slurm
          its operator accepts.
      type: dict
      sample: {version: 1.2.1, line: "1.2", slurm_version: "26.05", minimum_slurm_version: "25.11"}
"""

from dataclasses import asdict
from typing import Any, Callable, Dict

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.values import slinky_values


def slinky_values_filter(pools: Any, *args: Any, **kwargs: Any) -> Dict[str, Any]:
    # The arguments are slinky_values's own (login_users, storage, options, keys_configmap,
    # variables, chart_version).
    try:
        values = slinky_values(pools, *args, **kwargs)
    except FieldError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {
        "operator": values.operator,
        "slurm": values.slurm,
        "authorized_keys": values.authorized_keys,
        "chart": asdict(values.chart),
    }


class FilterModule:
    def filters(self) -> Dict[str, Callable[..., Any]]:
        return {"slinky_values": slinky_values_filter}
