# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import base64
import copy
import struct
from typing import Any, Dict, List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.charts import (
    CHART_LINES,
    DEFAULT_CHART_VERSION,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slinky.values import (
    ChartFacts,
    SlinkyValuesError,
    authorized_keys,
    check_ssh_public_key,
    operator_chart_values,
    slinky_values,
    slurm_chart_values,
)

# Real ssh-keygen output (OpenSSH 9.2, Debian bookworm); the private halves were deleted.
ALICE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHEVTZoDIeCxaPalMEegyC6PltJjxVgBVQXWyfiIIk39 alice@lab"
BOB_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCxhOXN96Piw8cakRfLgo+llxbTKAZ6S9afiz4O5dHmpqi6QTxLjRSPeQOA9iaLsyhH"
    "VR1VFl2G8rf4T8lwYqBQgESvEH3phY7pfE5YQCa++dJteBpCuV6AobtydfC84Yqbgsh5XedHqcLLnRoJpKbHTcL0OWEQDpKFWkWUtKGW"
    "MveMJMkmJsoEYu8P845G6e6T5nD42qVc0drLglKGqewWx7O8xA5zrhuUTmdRoPww7TbPC8P7XEslMzJF5sJ9GSqyr74ghXpdvg49p+MD"
    "wDP/byC1H50Mq0XR/YFJZ2b5TSREplfNKaJ906XTHWVvjtVVBbS32aIcH0ZIDRUxKMGf bob@lab"
)
STORAGE = {"home_claim": "slurm-home", "checkpoints_claim": "slurm-checkpoints"}
POOL_A = {"name": "gpu-a", "count": 8, "spares": 2, "gpus_per_node": 8}
POOL_B = {"name": "gpu-b", "count": 2, "gpus_per_node": 4}
USERS = [{"name": "alice", "ssh_authorized_keys": [ALICE_KEY]}]


def _key_line(key_type: str, blob_type: str) -> str:
    blob = struct.pack(">I", len(blob_type)) + blob_type.encode() + b"\x00" * 36
    return "%s %s test" % (key_type, base64.b64encode(blob).decode())


def _values(**overrides: Any) -> Dict[str, Any]:
    args: Dict[str, Any] = {
        "pools": [POOL_A],
        "login_users": USERS,
        "storage": STORAGE,
        "options": None,
        "chart_version": DEFAULT_CHART_VERSION,
    }
    args.update(overrides)
    return slurm_chart_values(
        args["pools"], args["login_users"], args["storage"], args["options"], chart_version=args["chart_version"]
    )


def test_default_chart_is_the_newest_stable_line() -> None:
    assert DEFAULT_CHART_VERSION == "1.2.1"
    assert sorted(CHART_LINES) == ["1.1", "1.2"]


def test_one_pool_gives_one_gpu_nodeset_on_its_nodes() -> None:
    values = _values()
    nodeset = values["nodesets"]["gpu-a"]
    assert nodeset["enabled"] is True
    assert nodeset["replicas"] == 8
    assert nodeset["extraConfMap"]["Gres"] == ["gpu:8"]
    assert nodeset["slurmd"]["resources"] == {"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}}
    assert nodeset["podSpec"]["nodeSelector"] == {"kubernetes.io/os": "linux", "gpufleet.io/pool": "gpu-a"}
    assert nodeset["podSpec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert nodeset["workloadDisruptionProtection"] is True
    # 1.2.x merges every NodeSet over nodesetDefaults: images and the rest come from there.
    assert "image" not in nodeset["slurmd"]
    assert sorted(values["nodesets"]) == ["gpu-a"]
    assert values["configFiles"]["gres.conf"] == "AutoDetect=nvidia\n"
    assert values["controller"]["extraConfMap"]["GresTypes"] == "gpu"


def test_chart_1_1_nodesets_and_loginset_carry_the_sample_entry() -> None:
    values = _values(chart_version="1.1.2")
    nodeset = values["nodesets"]["gpu-a"]
    # 1.1.x gives a new NodeSet key no defaults: without the image the chart fails to render.
    assert nodeset["slurmd"]["image"] == {"repository": "ghcr.io/slinkyproject/slurmd", "tag": "25.11-ubuntu24.04"}
    assert nodeset["logfile"]["image"]["repository"] == "docker.io/library/alpine"
    assert nodeset["scalingMode"] == "StatefulSet" and nodeset["taintKubeNodes"] is False
    # Ours still win over the sample.
    assert nodeset["replicas"] == 8 and nodeset["enabled"] is True
    assert nodeset["slurmd"]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert nodeset["podSpec"]["nodeSelector"] == {"kubernetes.io/os": "linux", "gpufleet.io/pool": "gpu-a"}
    login = values["loginsets"]["login"]
    assert login["login"]["image"]["tag"] == "25.11-ubuntu24.04"
    assert login["initconf"]["image"]["repository"] == "docker.io/library/alpine"
    assert login["enabled"] is True
    # The chart's sample NodeSet would start a CPU slurmd nobody asked for, and its sample
    # partition "all" is on.
    assert values["nodesets"]["slinky"] == {"enabled": False}
    assert values["partitions"]["all"] == {"enabled": False}


def test_chart_1_1_sample_entries_are_copies() -> None:
    first = _values(chart_version="1.1.2")
    first["nodesets"]["gpu-a"]["slurmd"]["image"]["tag"] = "changed"
    assert _values(chart_version="1.1.2")["nodesets"]["gpu-a"]["slurmd"]["image"]["tag"] == "25.11-ubuntu24.04"


def test_chart_facts_name_the_slurm_of_each_line() -> None:
    assert slinky_values([POOL_A], USERS, STORAGE).chart == ChartFacts("1.2.1", "1.2", "26.05", "25.11")
    assert slinky_values([POOL_A], USERS, STORAGE, chart_version="v1.1.2").chart == ChartFacts(
        "1.1.2", "1.1", "25.11", "25.11"
    )


def test_two_pools_share_one_partition_with_their_own_gres() -> None:
    values = _values(pools=[POOL_A, POOL_B])
    assert sorted(name for name, ns in values["nodesets"].items() if ns.get("enabled")) == ["gpu-a", "gpu-b"]
    assert values["nodesets"]["gpu-b"]["replicas"] == 2
    assert values["nodesets"]["gpu-b"]["extraConfMap"]["Gres"] == ["gpu:4"]
    assert values["nodesets"]["gpu-b"]["slurmd"]["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert values["nodesets"]["gpu-b"]["podSpec"]["nodeSelector"]["gpufleet.io/pool"] == "gpu-b"
    assert values["partitions"]["gpu"]["nodesets"] == ["gpu-a", "gpu-b"]
    assert values["partitions"]["gpu"]["configMap"]["Default"] == "YES"
    # 1.2.x's sample partition "all" is off already.
    assert "all" not in values["partitions"]
    assert all(not ns.get("partition", {}).get("enabled", False) for ns in values["nodesets"].values())


def test_pool_defaults_come_from_the_pool_model() -> None:
    values = _values(pools=[{"name": "gpu-c", "count": 1}])
    assert values["nodesets"]["gpu-c"]["replicas"] == 1
    assert values["nodesets"]["gpu-c"]["extraConfMap"]["Gres"] == ["gpu:8"]
    assert values["nodesets"]["gpu-c"]["extraConfMap"]["Features"] == ["pool-gpu-c"]


def test_a_pool_tolerates_its_own_taints() -> None:
    taints = [
        {"key": "dedicated", "value": "slurm", "effect": "NoSchedule"},
        {"key": "example.com/maintenance", "effect": "NoExecute"},
    ]
    tolerations = _values(pools=[dict(POOL_A, taints=taints)])["nodesets"]["gpu-a"]["podSpec"]["tolerations"]
    assert tolerations == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "slurm", "effect": "NoSchedule"},
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"},
    ]


def test_pool_tolerations_add_to_the_common_ones_once() -> None:
    extra = {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}
    common = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    values = _values(pools=[dict(POOL_A, tolerations=[common, extra])])
    assert values["nodesets"]["gpu-a"]["podSpec"]["tolerations"] == [common, extra]


def test_home_and_checkpoint_claims_are_mounted_in_slurmd_and_login() -> None:
    values = _values(storage=dict(STORAGE, checkpoints_path="/ckpt"))
    volumes = [
        {"name": "gpufleet-home", "persistentVolumeClaim": {"claimName": "slurm-home"}},
        {"name": "gpufleet-checkpoints", "persistentVolumeClaim": {"claimName": "slurm-checkpoints"}},
    ]
    mounts = [{"name": "gpufleet-home", "mountPath": "/home"}, {"name": "gpufleet-checkpoints", "mountPath": "/ckpt"}]
    nodeset = values["nodesets"]["gpu-a"]
    assert nodeset["podSpec"]["volumes"] == volumes
    assert nodeset["slurmd"]["volumeMounts"] == mounts
    login = values["loginsets"]["login"]
    assert login["podSpec"]["volumes"][:2] == volumes
    assert login["login"]["volumeMounts"][:2] == mounts


def test_login_set_reads_each_users_keys_from_the_configmap() -> None:
    users = [
        {"name": "alice", "ssh_authorized_keys": [ALICE_KEY]},
        {"name": "bob", "ssh_authorized_keys": [BOB_KEY, ALICE_KEY], "admin": True},
    ]
    values = slurm_chart_values([POOL_A], users, STORAGE, {"login_service_type": "NodePort"}, keys_configmap="keys")
    login = values["loginsets"]["login"]
    assert login["enabled"] is True and login["replicas"] == 1
    assert {"name": "gpufleet-authorized-keys", "configMap": {"name": "keys", "defaultMode": 0o444}} in login[
        "podSpec"
    ]["volumes"]
    assert {
        "name": "gpufleet-authorized-keys",
        "mountPath": "/etc/ssh/gpufleet-authorized-keys",
        "readOnly": True,
    } in login["login"]["volumeMounts"]
    assert login["extraSshdConfig"] == "AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/gpufleet-authorized-keys/%u\n"
    # Only the admin's keys reach root.
    assert login["rootSshAuthorizedKeys"] == BOB_KEY + "\n" + ALICE_KEY + "\n"
    assert login["service"] == {"spec": {"type": "NodePort"}}
    assert authorized_keys(users) == {"alice": ALICE_KEY + "\n", "bob": BOB_KEY + "\n" + ALICE_KEY + "\n"}


def test_no_admin_means_no_root_keys() -> None:
    assert _values()["loginsets"]["login"]["rootSshAuthorizedKeys"] is None


def test_propagated_conditions_go_to_the_operator_chart() -> None:
    assert operator_chart_values() == {
        "crds": {"enabled": False},
        "webhook": {"enabled": True},
        "certManager": {"enabled": True},
        "propagatedNodeConditions": ["GpuHealthy"],
    }
    options = {"propagated_node_conditions": ["GpuHealthy", "XidFatal"]}
    assert operator_chart_values(options)["propagatedNodeConditions"] == ["GpuHealthy", "XidFatal"]
    assert "propagatedNodeConditions" not in _values(options=options)


def test_chart_1_1_operator_has_no_propagated_conditions() -> None:
    # The 1.1.x operator chart has no such value; writing it would be silently ignored.
    assert operator_chart_values(chart_version="1.1.2") == {
        "crds": {"enabled": False},
        "webhook": {"enabled": True},
        "certManager": {"enabled": True},
    }


def test_webhook_and_its_certificate_are_options() -> None:
    values = operator_chart_values({"webhook": False, "webhook_cert_manager": False})
    assert values["webhook"] == {"enabled": False}
    assert values["certManager"] == {"enabled": False}
    # The CRDs are their own release; the operator chart's dependency stays off either way.
    assert values["crds"] == {"enabled": False}


def test_options_set_cluster_partition_and_slurm_conf() -> None:
    values = _values(
        options={
            "cluster_name": "fleet",
            "partition_name": "train",
            "slurm_conf": {"KillWait": 120},
            "login_set_name": "ssh",
        }
    )
    assert values["clusterName"] == "fleet"
    assert list(values["loginsets"]) == ["ssh"]
    assert values["partitions"]["train"]["nodesets"] == ["gpu-a"]
    assert values["controller"]["extraConfMap"] == {"GresTypes": "gpu", "KillWait": 120}


def test_extra_values_merge_last_like_helm() -> None:
    extra = {"nodesets": {"gpu-a": {"slurmd": {"image": {"tag": "25.11-custom"}}}}, "accounting": {"enabled": False}}
    values = _values(options={"extra_values": extra})
    slurmd = values["nodesets"]["gpu-a"]["slurmd"]
    assert slurmd["image"] == {"tag": "25.11-custom"}
    assert slurmd["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert values["accounting"] == {"enabled": False}


def test_inputs_are_not_modified() -> None:
    pools = [dict(POOL_A, tolerations=[{"key": "x", "operator": "Exists"}])]
    options: Dict[str, Any] = {"extra_values": {"nodesets": {"gpu-a": {"replicas": 3}}}}
    before = copy.deepcopy((pools, options))
    values = slinky_values(pools, USERS, STORAGE, options)
    values.slurm["nodesets"]["gpu-a"]["podSpec"]["tolerations"].append({"key": "y"})
    assert (pools, options) == before
    assert values.slurm["nodesets"]["gpu-a"]["replicas"] == 3


def test_check_ssh_public_key_accepts_real_keys_and_normalizes_spaces() -> None:
    assert check_ssh_public_key(ALICE_KEY, "k") == ALICE_KEY
    assert check_ssh_public_key("  " + BOB_KEY.replace(" ", "   ", 1) + "\n", "k") == BOB_KEY
    assert check_ssh_public_key(_key_line("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"), "k").startswith("ecdsa")


def test_extra_values_cannot_tolerate_cordons_through_nodeset_defaults() -> None:
    extra = {"nodesetDefaults": {"podSpec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable"}]}}}
    with pytest.raises(SlinkyValuesError) as caught:
        _values(options={"extra_values": extra})
    assert caught.value.field == "options.extra_values.nodesetDefaults.podSpec.tolerations[0].key"


def test_values_error_is_a_field_error() -> None:
    assert issubclass(SlinkyValuesError, FieldError)
    # Errors of the pool model reach callers as SlinkyValuesError too.
    with pytest.raises(SlinkyValuesError):
        _values(pools=[{"name": "gpu-a", "count": 0}])


def _error(**overrides: Any) -> SlinkyValuesError:
    with pytest.raises(SlinkyValuesError) as caught:
        _values(**overrides)
    return caught.value


BAD_INPUT: List[Any] = [
    # (overrides, field, message fragment)
    ({"pools": []}, "gpufleet_node_pools", "at least one GPU pool"),
    ({"pools": "gpu-a"}, "gpufleet_node_pools", "must be a list"),
    ({"pools": ["gpu-a"]}, "gpufleet_node_pools[0]", "must be a dict"),
    ({"pools": [{"count": 1}]}, "gpufleet_node_pools[0].name", "is required"),
    ({"pools": [{"name": "GPU_A", "count": 1}]}, "gpufleet_node_pools[0].name", "lowercase letters"),
    ({"pools": [{"name": "a" * 41, "count": 1}]}, "gpufleet_node_pools[0].name", "at most 40"),
    ({"pools": [POOL_A, dict(POOL_B, name="gpu-a")]}, "gpufleet_node_pools[1].name", "'gpu-a' is also the name"),
    ({"pools": [dict(POOL_A, count=-1)]}, "gpufleet_node_pools[0].count", "must be >= 1"),
    ({"pools": [{"name": "gpu-a"}]}, "gpufleet_node_pools[0].count", "is required"),
    ({"pools": [dict(POOL_A, count=True)]}, "gpufleet_node_pools[0].count", "must be an integer"),
    ({"pools": [dict(POOL_A, count="eight")]}, "gpufleet_node_pools[0].count", "must be an integer"),
    ({"pools": [dict(POOL_A, gpus_per_node=0)]}, "gpufleet_node_pools[0].gpus_per_node", "must be >= 1"),
    ({"pools": [dict(POOL_A, colour="red")]}, "gpufleet_node_pools[0].colour", "unknown pool field"),
    (
        {"pools": [dict(POOL_A, tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])]},
        "gpufleet_node_pools[0].tolerations[0].key",
        "cordoned",
    ),
    ({"chart_version": "1.0.3"}, "chart_version", "supported lines: 1.1.x, 1.2.x"),
    ({"chart_version": "latest"}, "chart_version", "must be a chart version"),
    ({"login_users": "alice"}, "login_users", "must be a list"),
    (
        {"login_users": [{"name": "Alice", "ssh_authorized_keys": [ALICE_KEY]}]},
        "login_users[0].name",
        "POSIX user name",
    ),
    ({"login_users": [{"name": "alice"}]}, "login_users[0].ssh_authorized_keys", "at least one SSH public key"),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": ALICE_KEY}]},
        "login_users[0].ssh_authorized_keys",
        "must be a list",
    ),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": ["AAAAC3NzaC1lZDI1NTE5AAAAIHEV"]}]},
        "login_users[0].ssh_authorized_keys[0]",
        "<type> <base64>",
    ),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": ['from="10.0.0.1" ' + ALICE_KEY]}]},
        "login_users[0].ssh_authorized_keys[0]",
        "no key options",
    ),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": ["ssh-ed25519 not*base64 alice"]}]},
        "login_users[0].ssh_authorized_keys[0]",
        "not base64",
    ),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": [ALICE_KEY.replace("ssh-ed25519", "ssh-rsa")]}]},
        "login_users[0].ssh_authorized_keys[0]",
        "does not hold a ssh-rsa key",
    ),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": ["ssh-ed25519 AAAA"]}]},
        "login_users[0].ssh_authorized_keys[0]",
        "truncated",
    ),
    (
        {"login_users": [{"name": "alice", "ssh_authorized_keys": [ALICE_KEY + "\n" + BOB_KEY]}]},
        "login_users[0].ssh_authorized_keys[0]",
        "one SSH public key line",
    ),
    ({"login_users": USERS + USERS}, "login_users[1].name", "duplicate login user 'alice'"),
    ({"login_users": [dict(USERS[0], admin="yes")]}, "login_users[0].admin", "true or false"),
    ({"storage": None}, "storage", "must be a dict"),
    ({"storage": {"checkpoints_claim": "c"}}, "storage.home_claim", "PersistentVolumeClaim name"),
    ({"storage": dict(STORAGE, checkpoints_claim="slurm-home")}, "storage.checkpoints_claim", "must differ"),
    ({"storage": dict(STORAGE, home_path="home")}, "storage.home_path", "absolute path"),
    ({"storage": dict(STORAGE, checkpoints_path="/ckpt/")}, "storage.checkpoints_path", "normalized"),
    ({"storage": dict(STORAGE, checkpoints_path="/")}, "storage.checkpoints_path", "other than /"),
    ({"storage": dict(STORAGE, checkpoints_path="/home/ckpt")}, "storage.checkpoints_path", "overlap"),
    ({"options": {"colour": "blue"}}, "options.colour", "unknown option"),
    ({"options": {"cluster_name": "Fleet"}}, "options.cluster_name", "lowercase"),
    ({"options": {"partition_name": "gpu part"}}, "options.partition_name", "partition name"),
    ({"options": {"login_set_name": "Login"}}, "options.login_set_name", "DNS label"),
    ({"options": {"login_replicas": 0}}, "options.login_replicas", "must be >= 1"),
    ({"options": {"login_service_type": "ExternalName"}}, "options.login_service_type", "must be one of"),
    ({"options": {"propagated_node_conditions": "GpuHealthy"}}, "options.propagated_node_conditions", "must be a list"),
    (
        {"options": {"propagated_node_conditions": ["gpu healthy"]}},
        "options.propagated_node_conditions[0]",
        "condition type",
    ),
    (
        {"options": {"propagated_node_conditions": ["GpuHealthy", "GpuHealthy"]}},
        "options.propagated_node_conditions",
        "twice",
    ),
    ({"options": {"tolerations": [{"operator": "Exists"}]}}, "options.tolerations[0].key", "every taint"),
    (
        {"options": {"tolerations": [{"key": "gpufleet.io/gpu-unhealthy", "operator": "Exists"}]}},
        "options.tolerations[0].key",
        "unhealthy",
    ),
    (
        {"options": {"tolerations": [{"key": "a", "operator": "In"}]}},
        "options.tolerations[0].operator",
        "Equal or Exists",
    ),
    ({"options": {"webhook": "yes"}}, "options.webhook", "true or false"),
    ({"options": {"webhook_cert_manager": None}}, "options.webhook_cert_manager", "true or false"),
    ({"options": {"gres_conf": ""}}, "options.gres_conf", "non-empty"),
    ({"options": {"slurm_conf": {"Kill Wait": 1}}}, "options.slurm_conf.Kill Wait", "slurm.conf parameter"),
    ({"options": {"extra_values": []}}, "options.extra_values", "must be a dict"),
    (
        {"options": {"extra_values": {"nodesets": {"gpu-a": {"podSpec": {"tolerations": [{"operator": "Exists"}]}}}}}},
        "options.extra_values.nodesets.gpu-a.podSpec.tolerations[0].key",
        "every taint",
    ),
    (
        {"options": {"extra_values": {"nodesets": {"gpu-a": {"taintKubeNodes": True}}}}},
        "options.extra_values.nodesets.gpu-a.taintKubeNodes",
        "must stay false",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"), BAD_INPUT, ids=[case[1] + ":" + case[2] for case in BAD_INPUT]
)
def test_bad_input_names_its_field(overrides: Dict[str, Any], field: str, fragment: str) -> None:
    error = _error(**overrides)
    assert error.field == field
    assert fragment in error.message
    assert str(error).startswith(field + ": ")


def test_variable_names_and_prefixes_appear_in_errors() -> None:
    names = {
        "pools": "slurm_node_pools",
        "storage": "slurm_slinky_",
        "options": "slurm_slinky_",
        "login_users": "slurm_slinky_login_users",
        "chart_version": "slurm_slinky_version",
    }
    with pytest.raises(SlinkyValuesError) as caught:
        slinky_values([POOL_A], USERS, STORAGE, variables=names, chart_version="2.0.0")
    assert caught.value.field == "slurm_slinky_version"
    cases = [
        ([dict(POOL_A, count=-1)], USERS, STORAGE, None, "slurm_node_pools[0].count"),
        ([POOL_A], [{"name": "alice"}], STORAGE, None, "slurm_slinky_login_users[0].ssh_authorized_keys"),
        ([POOL_A], USERS, dict(STORAGE, home_claim="Home"), None, "slurm_slinky_home_claim"),
        ([POOL_A], USERS, STORAGE, {"tolerations": [{"operator": "Exists"}]}, "slurm_slinky_tolerations[0].key"),
        ([POOL_A], USERS, STORAGE, {"bogus": 1}, "slurm_slinky_bogus"),
    ]
    for pools, users, storage, options, field in cases:
        with pytest.raises(SlinkyValuesError) as caught:
            slinky_values(pools, users, storage, options, variables=names)
        assert caught.value.field == field
