# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Helm values for Slinky's ``slurm-operator`` and ``slurm`` charts (1.1.x and 1.2.x), from the inventory.

Chart facts (github.com/SlinkyProject/slurm-operator, ``helm/slurm/values.yaml`` and
``helm/slurm-operator/values.yaml`` of v1.1.2 and v1.2.1; what differs between the lines is in
``charts.py``):

- ``slurm`` chart: ``nodesets.<name>`` holds ``replicas``, ``slurmd.resources``,
  ``slurmd.volumeMounts``, ``extraConfMap`` (added to ``slurmd --conf``, e.g. ``Gres``),
  ``partition.enabled``, ``podSpec`` (``nodeSelector``, ``tolerations``, ``volumes``) and
  ``workloadDisruptionProtection``. ``loginsets.<name>`` holds ``login.volumeMounts``,
  ``rootSshAuthorizedKeys``, ``extraSshdConfig``, ``podSpec`` and ``service.spec``; the chart
  names the LoginSet ``<fullname>-login-<name>``. ``configFiles`` are extra files in
  ``/etc/slurm``; ``controller.extraConfMap`` is appended to ``slurm.conf``; ``partitions`` maps
  a partition name to its NodeSets.
- ``slurm-operator`` chart: the top-level ``propagatedNodeConditions`` (1.2.x only) lists the
  node condition types whose reason and message the operator copies into the Slurm drain
  reason when a node is cordoned. It is an operator value, not a ``slurm`` chart value.
  ``webhook.enabled`` runs the admission webhook; ``certManager.enabled`` has cert-manager issue
  its certificate (Issuer and Certificate objects), otherwise Helm generates a self-signed one.
- The operator prefixes every drain reason it sets with ``slurm-operator:`` and leaves other
  drains alone (docs/usage/nodeset-operations.md). Nothing generated here may let a NodeSet pod
  land on a cordoned or health-tainted node, or the cordon no longer means "drain this node".

The pools come from the one pool model (``fleet/pools.py``); this module adds only what the
charts need.

Pure data: no I/O, no clients.
"""

from __future__ import annotations

import base64
import binascii
import copy
import posixpath
import re
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int, check_mapping, check_sequence
from ansible_collections.gpufleet.resilience.plugins.module_utils.fleet.pools import (
    POOL_LABEL,
    NodePool,
    check_toleration,
    parse_pools,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.charts import (
    DEFAULT_CHART_VERSION,
    ChartLine,
    chart_line,
)

GPU_RESOURCE = "nvidia.com/gpu"
AUTHORIZED_KEYS_VOLUME = "gpufleet-authorized-keys"
AUTHORIZED_KEYS_DIR = "/etc/ssh/gpufleet-authorized-keys"
HOME_VOLUME = "gpufleet-home"
CHECKPOINTS_VOLUME = "gpufleet-checkpoints"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# LoginSet names become part of pod names (<release>-login-<name>-<hash>), as pool names do.
_SET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?")
_USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_CONDITION_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")
_CLUSTER_NAME = re.compile(r"[a-z0-9][-a-z0-9_]{0,39}")
_PARTITION_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,127}")
_SLURM_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_SSH_KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")

DEFAULT_OPTIONS: Dict[str, Any] = {
    "cluster_name": "gpufleet",
    "partition_name": "gpu",
    "login_set_name": "login",
    "login_replicas": 1,
    "login_service_type": "LoadBalancer",
    # The node conditions the health agent publishes; their reason lands in the drain reason.
    "propagated_node_conditions": ["GpuHealthy"],
    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
    # slurmd finds the GPUs through NVML; a site without NVML in its image sets gres_conf.
    "gres_conf": "AutoDetect=nvidia\n",
    "slurm_conf": {},
    "extra_values": {},
    # The operator's admission webhook, and whether cert-manager issues its certificate (else
    # Helm generates a self-signed one on every install and upgrade).
    "webhook": True,
    "webhook_cert_manager": True,
}


class SlinkyValuesError(FieldError):
    """Bad input for the chart values; ``field`` names it as the inventory spells it."""


@contextmanager
def _as_values_error() -> Iterator[None]:
    # The pool model raises FieldError; callers of this module catch SlinkyValuesError.
    try:
        yield
    except SlinkyValuesError:
        raise
    except FieldError as exc:
        raise SlinkyValuesError(exc.field, exc.message) from exc


@dataclass(frozen=True)
class LoginUser:
    name: str
    keys: List[str]
    admin: bool


@dataclass(frozen=True)
class ChartFacts:
    """Which chart line the values were made for, and the Slurm it runs."""

    version: str
    line: str
    slurm_version: str
    minimum_slurm_version: str


@dataclass(frozen=True)
class SharedStorage:
    home_claim: str
    home_path: str
    checkpoints_claim: str
    checkpoints_path: str


@dataclass(frozen=True)
class SlinkyValues:
    """What the role hands to Helm and Kubernetes."""

    operator: Dict[str, Any]
    slurm: Dict[str, Any]
    authorized_keys: Dict[str, str]
    chart: ChartFacts


def _prefix(variable: str) -> str:
    """Field prefix: ``options.`` for a dict variable, or the variable itself when it ends in ``_``
    (the role passes ``slurm_slinky_`` so that errors name ``slurm_slinky_tolerations``)."""
    return variable if variable.endswith("_") else variable + "."


# The shared field checks, raising SlinkyValuesError as every check of this module does.
def _int_at_least(value: Any, field: str, minimum: int) -> int:
    with _as_values_error():
        return check_int(value, field, minimum)


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    with _as_values_error():
        return check_mapping(value, field)


def _sequence(value: Any, field: str) -> Sequence[Any]:
    with _as_values_error():
        return check_sequence(value, field)


def _matching(value: Any, field: str, pattern: "re.Pattern[str]", what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise SlinkyValuesError(field, "must be %s, got %r" % (what, value))
    return value


def check_ssh_public_key(line: Any, field: str) -> str:
    """One authorized_keys line ``<type> <base64> [comment]``; the blob must name its own type."""
    if not isinstance(line, str) or "\n" in line.strip():
        raise SlinkyValuesError(field, "must be one SSH public key line, got %r" % (line,))
    parts = line.strip().split(None, 2)
    if len(parts) < 2 or parts[0] not in _SSH_KEY_TYPES:
        raise SlinkyValuesError(
            field,
            "must be '<type> <base64> [comment]' with type one of %s (no key options)"
            % ", ".join(sorted(_SSH_KEY_TYPES)),
        )
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise SlinkyValuesError(field, "the key data of this %s key is not base64" % parts[0]) from None
    # The blob starts with the key type as an SSH string (uint32 length, bytes): a key pasted
    # with the wrong type word, or truncated, fails here instead of on the login node.
    if len(blob) < 4:
        raise SlinkyValuesError(field, "the key data is truncated")
    (length,) = struct.unpack(">I", blob[:4])
    if blob[4 : 4 + length] != parts[0].encode("ascii"):
        raise SlinkyValuesError(field, "the key data does not hold a %s key" % parts[0])
    return " ".join(parts)


def _login_users(users: Any, variable: str) -> List[LoginUser]:
    result: List[LoginUser] = []
    seen = set()
    for index, user in enumerate(_sequence(users, variable)):
        where = "%s[%d]" % (variable, index)
        user = _mapping(user, where)
        name = _matching(user.get("name"), where + ".name", _USER_NAME, "a POSIX user name (lowercase, <= 32)")
        if name in seen:
            raise SlinkyValuesError(where + ".name", "duplicate login user %r" % name)
        seen.add(name)
        keys_field = where + ".ssh_authorized_keys"
        keys = _sequence(user.get("ssh_authorized_keys", []), keys_field)
        if not keys:
            raise SlinkyValuesError(keys_field, "needs at least one SSH public key, or user %r cannot log in" % name)
        checked = [check_ssh_public_key(key, "%s[%d]" % (keys_field, i)) for i, key in enumerate(keys)]
        admin = user.get("admin", False)
        if not isinstance(admin, bool):
            raise SlinkyValuesError(where + ".admin", "must be true or false, got %r" % (admin,))
        result.append(LoginUser(name=name, keys=checked, admin=admin))
    return result


def _storage(storage: Any, variable: str) -> SharedStorage:
    storage = _mapping(storage, variable)
    prefix = _prefix(variable)
    claims = {}
    paths = {}
    for key, default_path in (("home", "/home"), ("checkpoints", "/checkpoints")):
        claims[key] = _matching(
            storage.get(key + "_claim"), "%s%s_claim" % (prefix, key), _DNS_LABEL, "a PersistentVolumeClaim name"
        )
        path = storage.get(key + "_path", default_path)
        field = "%s%s_path" % (prefix, key)
        if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
            raise SlinkyValuesError(field, "must be a normalized absolute path other than /, got %r" % (path,))
        paths[key] = path
    if claims["home"] == claims["checkpoints"]:
        raise SlinkyValuesError(prefix + "checkpoints_claim", "must differ from home_claim %r" % claims["home"])
    home, ckpt = paths["home"], paths["checkpoints"]
    if home == ckpt or ckpt.startswith(home + "/") or home.startswith(ckpt + "/"):
        raise SlinkyValuesError(prefix + "checkpoints_path", "%r must not overlap home_path %r" % (ckpt, home))
    return SharedStorage(claims["home"], home, claims["checkpoints"], ckpt)


def _tolerations(value: Any, field: str) -> List[Dict[str, Any]]:
    # The pool model's rules: never the cordon taint, a gpufleet.io/ taint or every taint.
    with _as_values_error():
        return [check_toleration(t, "%s[%d]" % (field, i)) for i, t in enumerate(_sequence(value, field))]


def _options(options: Any, variable: str) -> Dict[str, Any]:
    given = _mapping(options if options is not None else {}, variable)
    unknown = sorted(set(given) - set(DEFAULT_OPTIONS))
    if unknown:
        raise SlinkyValuesError(_prefix(variable) + unknown[0], "unknown option")
    merged = dict(copy.deepcopy(DEFAULT_OPTIONS))
    merged.update(given)
    field = _prefix(variable)
    _matching(
        merged["cluster_name"], field + "cluster_name", _CLUSTER_NAME, "lowercase letters, digits, - and _ (<= 40)"
    )
    _matching(merged["partition_name"], field + "partition_name", _PARTITION_NAME, "a Slurm partition name")
    _matching(merged["login_set_name"], field + "login_set_name", _SET_NAME, "a DNS label of at most 40 characters")
    merged["login_replicas"] = _int_at_least(merged["login_replicas"], field + "login_replicas", 1)
    if merged["login_service_type"] not in _SERVICE_TYPES:
        raise SlinkyValuesError(field + "login_service_type", "must be one of %s" % ", ".join(_SERVICE_TYPES))
    conditions = _sequence(merged["propagated_node_conditions"], field + "propagated_node_conditions")
    for i, condition in enumerate(conditions):
        _matching(condition, "%spropagated_node_conditions[%d]" % (field, i), _CONDITION_TYPE, "a node condition type")
    if len(set(conditions)) != len(conditions):
        raise SlinkyValuesError(field + "propagated_node_conditions", "lists a condition type twice")
    merged["tolerations"] = _tolerations(merged["tolerations"], field + "tolerations")
    if not isinstance(merged["gres_conf"], str) or not merged["gres_conf"].strip():
        raise SlinkyValuesError(field + "gres_conf", "must be the non-empty text of gres.conf")
    for key in _mapping(merged["slurm_conf"], field + "slurm_conf"):
        _matching(key, "%sslurm_conf.%s" % (field, key), _SLURM_KEY, "a slurm.conf parameter name")
    _mapping(merged["extra_values"], field + "extra_values")
    for key in ("webhook", "webhook_cert_manager"):
        if not isinstance(merged[key], bool):
            raise SlinkyValuesError(field + key, "must be true or false, got %r" % (merged[key],))
    return merged


def _storage_mounts(storage: SharedStorage) -> List[Dict[str, Any]]:
    return [
        {"name": HOME_VOLUME, "mountPath": storage.home_path},
        {"name": CHECKPOINTS_VOLUME, "mountPath": storage.checkpoints_path},
    ]


def _storage_volumes(storage: SharedStorage) -> List[Dict[str, Any]]:
    return [
        {"name": HOME_VOLUME, "persistentVolumeClaim": {"claimName": storage.home_claim}},
        {"name": CHECKPOINTS_VOLUME, "persistentVolumeClaim": {"claimName": storage.checkpoints_claim}},
    ]


def _pool_tolerations(pool: NodePool, common: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The fleet-wide tolerations, the pool's own, and one for each taint the pool's nodes carry
    (a pool is tainted to keep other work off its nodes, not its own slurmd pods)."""
    tolerations = list(common)
    own = [dict(t) for t in pool.tolerations]
    own += [
        {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
        if t.value
        else {"key": t.key, "operator": "Exists", "effect": t.effect}
        for t in pool.taints
    ]
    tolerations += [t for t in own if t not in tolerations]
    return tolerations


def _nodeset(pool: NodePool, storage: SharedStorage, options: Mapping[str, Any], line: ChartLine) -> Dict[str, Any]:
    gpu_limit = {GPU_RESOURCE: pool.gpus_per_node}
    nodeset = {
        "enabled": True,
        "replicas": pool.count,
        "slurmd": {
            # Extended resources need requests == limits; the device plugin then hands the pod
            # exactly the GPUs that Slurm schedules as gpu:<n>.
            "resources": {"requests": dict(gpu_limit), "limits": dict(gpu_limit)},
            "volumeMounts": _storage_mounts(storage),
        },
        "extraConfMap": {"Gres": ["gpu:%d" % pool.gpus_per_node], "Features": ["pool-%s" % pool.name]},
        # One partition for the whole fleet (partitions below); no partition per pool.
        "partition": {"enabled": False},
        # The operator's PDB keeps busy slurmd pods until their jobs leave; remediation relies on it.
        "workloadDisruptionProtection": True,
        "podSpec": {
            "nodeSelector": {"kubernetes.io/os": "linux", POOL_LABEL: pool.name},
            "tolerations": _pool_tolerations(pool, options["tolerations"]),
            "volumes": _storage_volumes(storage),
        },
    }
    # 1.1.x gives a new NodeSet key no defaults: it must carry the chart's whole sample entry.
    return deep_merge(line.nodeset_defaults(), nodeset)


def _nodesets(
    pools: Any, variable: str, storage: SharedStorage, options: Mapping[str, Any], line: ChartLine
) -> Dict[str, Any]:
    with _as_values_error():
        parsed = parse_pools(pools, variable)
    if not parsed:
        raise SlinkyValuesError(variable, "needs at least one GPU pool")
    return {pool.name: _nodeset(pool, storage, options, line) for pool in parsed}


def _loginset(
    users: List[LoginUser],
    storage: SharedStorage,
    options: Mapping[str, Any],
    keys_configmap: str,
    line: ChartLine,
) -> Dict[str, Any]:
    root_keys = [key for user in users if user.admin for key in user.keys]
    loginset = {
        "enabled": True,
        "replicas": options["login_replicas"],
        "login": {
            "volumeMounts": [
                *_storage_mounts(storage),
                {"name": AUTHORIZED_KEYS_VOLUME, "mountPath": AUTHORIZED_KEYS_DIR, "readOnly": True},
            ],
        },
        # The chart writes only root's authorized_keys; every other user's keys come from the
        # ConfigMap, one file per user, so a key change needs no new home directory content.
        "rootSshAuthorizedKeys": "\n".join(root_keys) + "\n" if root_keys else None,
        "extraSshdConfig": "AuthorizedKeysFile .ssh/authorized_keys %s/%%u\n" % AUTHORIZED_KEYS_DIR,
        "podSpec": {
            "volumes": [
                *_storage_volumes(storage),
                {"name": AUTHORIZED_KEYS_VOLUME, "configMap": {"name": keys_configmap, "defaultMode": 0o444}},
            ],
        },
        "service": {"spec": {"type": options["login_service_type"]}},
    }
    return deep_merge(line.loginset_defaults(), loginset)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> Dict[str, Any]:
    """Helm's rule for -f files: dicts merge key by key, anything else is replaced."""
    result = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def check_cordon_safe(values: Mapping[str, Any], field: str) -> None:
    """Refuse NodeSets whose pods could run on cordoned or health-tainted nodes."""
    entries = [("nodesets.%s" % name, nodeset) for name, nodeset in (values.get("nodesets") or {}).items()]
    # 1.2.x merges every NodeSet over nodesetDefaults.
    entries.append(("nodesetDefaults", values.get("nodesetDefaults")))
    for name, nodeset in entries:
        if not isinstance(nodeset, Mapping):
            continue
        where = "%s.%s" % (field, name)
        pod_spec = nodeset.get("podSpec") or {}
        _tolerations(pod_spec.get("tolerations") or [], where + ".podSpec.tolerations")
        # A NoExecute taint on the node would evict running slurmd pods before Slurm drains them.
        if nodeset.get("taintKubeNodes"):
            raise SlinkyValuesError(
                where + ".taintKubeNodes", "must stay false: it taints nodes outside the health agent's control"
            )


def _names(variables: Optional[Mapping[str, str]]) -> Dict[str, str]:
    names = {
        "pools": "gpufleet_node_pools",
        "login_users": "login_users",
        "storage": "storage",
        "options": "options",
        "chart_version": "chart_version",
    }
    names.update(variables or {})
    return names


def _chart_line(chart_version: Any, variable: str) -> ChartLine:
    with _as_values_error():
        return chart_line(chart_version, variable)


def slurm_chart_values(
    pools: Any,
    login_users: Any,
    storage: Any,
    options: Any = None,
    keys_configmap: str = "slurm-login-authorized-keys",
    variables: Optional[Mapping[str, str]] = None,
    chart_version: Any = DEFAULT_CHART_VERSION,
) -> Dict[str, Any]:
    """Values of the ``slurm`` chart: controller, one NodeSet per pool, one LoginSet, partition."""
    names = _names(variables)
    line = _chart_line(chart_version, names["chart_version"])
    opts = _options(options, names["options"])
    shared = _storage(storage, names["storage"])
    users = _login_users(login_users, names["login_users"])
    nodesets = _nodesets(pools, names["pools"], shared, opts, line)
    slurm_conf = {"GresTypes": "gpu"}
    slurm_conf.update(opts["slurm_conf"])
    values: Dict[str, Any] = {
        "clusterName": opts["cluster_name"],
        "configFiles": {"gres.conf": opts["gres_conf"]},
        "controller": {"extraConfMap": slurm_conf},
        "nodesets": nodesets,
        "loginsets": {opts["login_set_name"]: _loginset(users, shared, opts, keys_configmap, line)},
        "partitions": {
            opts["partition_name"]: {
                "enabled": True,
                "nodesets": sorted(nodesets),
                "configMap": {"State": "UP", "Default": "YES", "MaxTime": "UNLIMITED"},
            },
        },
    }
    # 1.1.x's sample NodeSet "slinky" and partition "all" are on by default; turn them off
    # unless the inventory defines a pool or partition of that name.
    if line.sample_nodeset and line.sample_nodeset not in nodesets:
        values["nodesets"][line.sample_nodeset] = {"enabled": False}
    if line.sample_partition_on and opts["partition_name"] != "all":
        values["partitions"]["all"] = {"enabled": False}
    values = deep_merge(values, opts["extra_values"])
    check_cordon_safe(values, _prefix(names["options"]) + "extra_values")
    return values


def operator_chart_values(
    options: Any = None,
    variable: str = "options",
    chart_version: Any = DEFAULT_CHART_VERSION,
    version_variable: str = "chart_version",
) -> Dict[str, Any]:
    """Values of the ``slurm-operator`` chart. The CRDs are their own release (the
    ``slurm-operator-crds`` chart), so the operator chart's CRD dependency stays off."""
    line = _chart_line(chart_version, version_variable)
    opts = _options(options, variable)
    values: Dict[str, Any] = {
        "crds": {"enabled": False},
        "webhook": {"enabled": opts["webhook"]},
        "certManager": {"enabled": opts["webhook_cert_manager"]},
    }
    if line.propagates_node_conditions:
        values["propagatedNodeConditions"] = list(opts["propagated_node_conditions"])
    return values


def authorized_keys(login_users: Any, variable: str = "login_users") -> Dict[str, str]:
    """ConfigMap data: one ``authorized_keys`` file per login user, named after the user."""
    return {user.name: "\n".join(user.keys) + "\n" for user in _login_users(login_users, variable)}


def chart_facts(chart_version: Any = DEFAULT_CHART_VERSION, variable: str = "chart_version") -> ChartFacts:
    line = _chart_line(chart_version, variable)
    return ChartFacts(
        version=str(chart_version).lstrip("v"),
        line=line.line,
        slurm_version=line.slurm_version,
        minimum_slurm_version=line.minimum_slurm_version,
    )


def slinky_values(
    pools: Any,
    login_users: Any,
    storage: Any,
    options: Any = None,
    keys_configmap: str = "slurm-login-authorized-keys",
    variables: Optional[Mapping[str, str]] = None,
    chart_version: Any = DEFAULT_CHART_VERSION,
) -> SlinkyValues:
    names = _names(variables)
    return SlinkyValues(
        operator=operator_chart_values(options, names["options"], chart_version, names["chart_version"]),
        slurm=slurm_chart_values(pools, login_users, storage, options, keys_configmap, variables, chart_version),
        authorized_keys=authorized_keys(login_users, names["login_users"]),
        chart=chart_facts(chart_version, names["chart_version"]),
    )
