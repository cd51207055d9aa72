# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What each supported line of SchedMD's Slinky charts needs from the values we generate.

The three charts (``slurm-operator-crds``, ``slurm-operator``, ``slurm``) are released together
under one version. Facts below are read from the charts themselves (``Chart.yaml`` and
``values.yaml`` of the v1.1.2 and v1.2.1 tags of github.com/SlinkyProject/slurm-operator):

- 1.1.x: ``slurm`` appVersion 25.11, images ``*:25.11-ubuntu24.04``. ``nodesets`` and
  ``loginsets`` are plain maps whose only defaults are the sample entries ``nodesets.slinky``
  (enabled) and ``loginsets.slinky`` (disabled): a NodeSet or LoginSet under any other key gets
  nothing from them, so the chart fails (``image repository is required``) unless the entry
  carries the whole sample. ``partitions.all`` is enabled. The operator chart has no
  ``propagatedNodeConditions``.
- 1.2.x: ``slurm`` appVersion 26.05, images ``*:26.05-ubuntu26.04``. Every ``nodesets.<key>`` is
  merged over ``nodesetDefaults`` and every ``loginsets.<key>`` over ``loginsetDefaults``; there
  is no sample NodeSet, and ``partitions.all`` is disabled. The operator chart has
  ``propagatedNodeConditions`` (``--propagated-node-conditions``). ``taintKubeNodes`` is gone.
- Both operator charts carry ``slinky.slurm.net/minimum-slurm-version: "25.11"`` and
  ``kubeVersion: ">= 1.29.0-0"``; both have ``crds.enabled`` (default false), ``webhook.enabled``
  and ``certManager.enabled`` (both default true).

Pure data: no I/O.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

DEFAULT_CHART_VERSION = "1.2.1"

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.+-]*)?")

# The 1.1.2 chart's sample entries, minus ``enabled`` (helm/slurm/values.yaml at v1.1.2).
# tests/integration/slinky/test_helm_template.py checks them against the chart. The bases are
# deep-copied on use (ChartLine.nodeset/loginset), so sharing the pod spec is safe.
_POD_SPEC_1_1: Dict[str, Any] = {
    "resources": {},
    "initContainers": [],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {},
    "tolerations": [],
    "volumes": [],
}
_NODESET_1_1: Dict[str, Any] = {
    "scalingMode": "StatefulSet",
    "replicas": 1,
    "taintKubeNodes": False,
    "workloadDisruptionProtection": True,
    "ordinalPadding": 0,
    "slurmd": {
        "image": {"repository": "ghcr.io/slinkyproject/slurmd", "tag": "25.11-ubuntu24.04"},
        "args": [],
        "env": [],
        "resources": {},
        "volumeMounts": [],
    },
    "logfile": {"image": {"repository": "docker.io/library/alpine", "tag": "latest"}, "resources": {}},
    "extraConf": None,
    "extraConfMap": {},
    "partition": {"enabled": False, "config": None, "configMap": {}},
    "ssh": {"enabled": False, "extraSshdConfig": None},
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
    "metadata": {},
    "podSpec": _POD_SPEC_1_1,
}
_LOGINSET_1_1: Dict[str, Any] = {
    "replicas": 1,
    "strategy": {},
    "login": {
        "image": {"repository": "ghcr.io/slinkyproject/login", "tag": "25.11-ubuntu24.04"},
        "env": [],
        "securityContext": {"privileged": False},
        "resources": {},
        "volumeMounts": [],
    },
    "initconf": {"image": {"repository": "docker.io/library/alpine", "tag": "latest"}, "resources": {}},
    "rootSshAuthorizedKeys": None,
    "extraSshdConfig": None,
    "metadata": {},
    "podSpec": _POD_SPEC_1_1,
    "service": {"metadata": {}, "spec": {"type": "LoadBalancer"}},
}


@dataclass(frozen=True)
class ChartLine:
    """One minor line of the Slinky charts and what its values need."""

    line: str
    # The Slurm release of the chart's default images (its appVersion), and the oldest Slurm the
    # operator accepts (its minimum-slurm-version annotation).
    slurm_version: str
    minimum_slurm_version: str
    # What a new nodesets.<key> / loginsets.<key> entry must carry because the chart gives it no
    # defaults (empty when the chart merges entries over nodesetDefaults / loginsetDefaults).
    nodeset_base: Mapping[str, Any] = field(default_factory=dict)
    loginset_base: Mapping[str, Any] = field(default_factory=dict)
    # The chart's own sample NodeSet that is on unless turned off, if any.
    sample_nodeset: Optional[str] = None
    # Whether the chart's sample partition "all" is on unless turned off.
    sample_partition_on: bool = False
    # Whether the operator chart has propagatedNodeConditions.
    propagates_node_conditions: bool = False

    def nodeset_defaults(self) -> Dict[str, Any]:
        return copy.deepcopy(dict(self.nodeset_base))

    def loginset_defaults(self) -> Dict[str, Any]:
        return copy.deepcopy(dict(self.loginset_base))


CHART_LINES: Dict[str, ChartLine] = {
    "1.1": ChartLine(
        line="1.1",
        slurm_version="25.11",
        minimum_slurm_version="25.11",
        nodeset_base=_NODESET_1_1,
        loginset_base=_LOGINSET_1_1,
        sample_nodeset="slinky",
        sample_partition_on=True,
        propagates_node_conditions=False,
    ),
    "1.2": ChartLine(
        line="1.2",
        slurm_version="26.05",
        minimum_slurm_version="25.11",
        propagates_node_conditions=True,
    ),
}


def chart_line(version: Any, field_name: str = "chart_version") -> ChartLine:
    """The supported line of a chart version such as ``1.2.1``; anything else is refused, since
    values for an unknown line have never been rendered against its chart."""
    match = _VERSION.fullmatch(version) if isinstance(version, str) else None
    if not match:
        raise FieldError(field_name, "must be a chart version such as %r, got %r" % (DEFAULT_CHART_VERSION, version))
    line = "%s.%s" % (match.group(1), match.group(2))
    if line not in CHART_LINES:
        raise FieldError(
            field_name,
            "Slinky chart %s is not supported; supported lines: %s"
            % (version, ", ".join(name + ".x" for name in sorted(CHART_LINES))),
        )
    return CHART_LINES[line]
