# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import DEFAULT_KMSG, parse_config
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.settings import ConfigError, load_config
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError


def test_defaults_are_the_safe_ones():
    config = parse_config({"node": "gpu-a-001"})
    assert config.interval == 1.0
    assert config.metrics.address == "127.0.0.1"
    assert config.kernel_log.source == "kmsg" and config.kernel_log_path == DEFAULT_KMSG
    assert config.fast_fence.enabled is False
    assert config.kubernetes.enabled is True and config.kubernetes.heartbeat == 60.0
    assert config.infiniband.enabled is True and config.infiniband.sysfs_root == "/sys"
    assert config.infiniband.thresholds.down_after_s == 10 and config.infiniband.thresholds.recover_after_s == 60
    assert (config.jobs.enabled, config.jobs.progress_dir, config.jobs.stall_after_s) == (
        True, "/run/gpufleet/progress", 600.0)


@pytest.mark.parametrize("raw, field", [
    ({}, "node"),
    ({"node": "Gpu_A"}, "node"),
    ({"node": "n", "interval": 0}, "interval"),
    ({"node": "n", "interval": "1"}, "interval"),
    ({"node": "n", "kernel_log": {"source": "file"}}, "kernel_log.path"),
    ({"node": "n", "kernel_log": {"source": "dmesg"}}, "kernel_log.source"),
    ({"node": "n", "kernel_log": {"sauce": "kmsg"}}, "kernel_log.sauce"),
    ({"node": "n", "metrics": {"port": 70000}}, "metrics.port"),
    ({"node": "n", "metrics": {"address": "a b"}}, "metrics.address"),
    ({"node": "n", "kubernetes": {"enabled": "yes"}}, "kubernetes.enabled"),
    ({"node": "n", "kubernetes": {"heartbeat": 0.5}}, "kubernetes.heartbeat"),
    ({"node": "n", "fast_fence": {"enabled": 1}}, "fast_fence.enabled"),
    ({"node": "n", "fast_fence": {"slurm_api": "grpc"}}, "fast_fence.slurm_api"),
    ({"node": "n", "fast_fence": {"slurm_api": "rest"}}, "fast_fence.rest_url"),
    ({"node": "n", "fast_fence": {"slurm_api": "rest", "rest_url": "http://slurm:6820", "rest_token_file": "/t"}},
     "fast_fence.rest_url"),
    ({"node": "n", "fast_fence": {"slurm_api": "rest", "rest_url": "https://slurm:6820"}},
     "fast_fence.rest_jwt_key_file"),
    ({"node": "n", "fast_fence": {"rest_url": "https://slurm:6820"}}, "fast_fence.rest_url"),
    ({"node": "n", "fast_fence": {"rest_allow_http": True}}, "fast_fence.rest_allow_http"),
    ({"node": "n", "driver_version": "latest"}, "driver_version"),
    ({"node": "n", "log_level": "loud"}, "log_level"),
    ({"node": "n", "nvml": {"path": "/x"}}, "nvml.path"),
    ({"node": "n", "colour": "blue"}, "colour"),
    ({"node": "n", "infiniband": {"enabled": "no"}}, "infiniband.enabled"),
    ({"node": "n", "infiniband": {"sysfs_root": ""}}, "infiniband.sysfs_root"),
    ({"node": "n", "infiniband": {"root": "/sys"}}, "infiniband.root"),
    ({"node": "n", "infiniband": {"thresholds": {"down_after_s": -1}}}, "infiniband.thresholds.down_after_s"),
    ({"node": "n", "infiniband": {"thresholds": {"flaps": 3}}}, "infiniband.thresholds.flaps"),
    ({"node": "n", "infiniband": {"thresholds": {"error_rate_per_min": {"crc": 1}}}},
     "infiniband.thresholds.error_rate_per_min.crc"),
    ({"node": "n", "jobs": {"enabled": 1}}, "jobs.enabled"),
    ({"node": "n", "jobs": {"progress_dir": ""}}, "jobs.progress_dir"),
    ({"node": "n", "jobs": {"stall_after_s": 0}}, "jobs.stall_after_s"),
    ({"node": "n", "jobs": {"stall_after_s": "600"}}, "jobs.stall_after_s"),
    ({"node": "n", "jobs": {"window": 60}}, "jobs.window"),
])
def test_bad_input_names_the_field(raw, field):
    with pytest.raises(FieldError) as caught:
        parse_config(raw)
    assert caught.value.field == field


def test_load_config_checks_thresholds_too(tmp_path):
    path = tmp_path / "agent.yml"
    path.write_text("node: n1\nthresholds: {window_s: -1}\n")
    with pytest.raises(ConfigError, match="window_s"):
        load_config(str(path))


def test_load_config_reports_yaml_and_missing_files(tmp_path):
    path = tmp_path / "agent.yml"
    path.write_text("node: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "absent.yml"))


def test_a_full_file_loads(tmp_path):
    (tmp_path / "kubeconfig").write_text(
        "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\nusers: [{name: u, user: {token: t}}]\n")
    path = tmp_path / "agent.yml"
    path.write_text(
        "node: gpu-a-001\ninterval: 0.5\ndriver_version: 575.51.03\nthresholds: {temperature_max_c: 80}\n"
        "nvml: {library_path: /opt/fake/libnvidia-ml.so.1}\nkernel_log: {source: file, path: /var/log/k.log}\n"
        "metrics: {address: 127.0.0.1, port: 19400}\n"
        "kubernetes: {kubeconfig: %s, heartbeat: 30, events: false, backoff_max: 5}\n"
        "journal: /tmp/j.jsonl\nfast_fence: {enabled: true, slurm_conf: /etc/slurm/slurm.conf}\nlog_level: debug\n"
        % (tmp_path / "kubeconfig"))
    config = load_config(str(path))
    assert config.kernel_log_path == "/var/log/k.log"
    assert config.kubernetes.events is False and config.fast_fence.slurm_conf == "/etc/slurm/slurm.conf"
    assert config.thresholds == {"temperature_max_c": 80}


def test_a_rest_fence_gives_the_transport_its_options():
    config = parse_config({"node": "gpu-a-001", "fast_fence": {
        "enabled": True, "slurm_api": "rest", "rest_url": "https://slurm-restapi.slurm:6820", "rest_user": "gpufleet",
        "rest_token_file": "/run/secrets/slurm-token/token"}})
    assert config.fast_fence.slurm_params() == {
        "slurm_api": "rest", "rest_url": "https://slurm-restapi.slurm:6820", "rest_user": "gpufleet",
        "rest_token_file": "/run/secrets/slurm-token/token", "rest_validate_certs": True, "rest_allow_http": False}


def test_a_kubeconfig_the_agent_cannot_use_is_refused_at_load(tmp_path):
    (tmp_path / "kubeconfig").write_text(
        "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
        "users: [{name: u, user: {exec: {command: aws}}}]\n")
    path = tmp_path / "agent.yml"
    path.write_text("node: n1\nkubernetes: {kubeconfig: %s}\n" % (tmp_path / "kubeconfig"))
    with pytest.raises(ConfigError, match=r"^kubernetes.kubeconfig: .*exec is not supported"):
        load_config(str(path))


def test_check_config_prints_the_infiniband_settings(tmp_path, child_env):
    """The role validates every lab agent's file with --check-config, which prints it as JSON."""
    import json
    import subprocess
    import sys

    path = tmp_path / "agent.yml"
    path.write_text("node: gpu-a-001\ninfiniband:\n  sysfs_root: /var/tmp/lab/gpus/gpu-a-001/sys\n"
                    "  thresholds: {ignore: [mlx5_3, mlx5_2/1], error_rate_per_min: {symbol_error: 5}}\n")
    done = subprocess.run([sys.executable, "-m", "ansible_collections.gpufleet.resilience.plugins.module_utils.agent",
                           "--check-config", "--config", str(path)], capture_output=True, text=True, check=False,
                          env=child_env)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)["infiniband"]
    assert printed["sysfs_root"] == "/var/tmp/lab/gpus/gpu-a-001/sys"
    assert printed["thresholds"]["ignore"] == ["mlx5_2/1", "mlx5_3"]
    assert printed["thresholds"]["error_rate_per_min"]["symbol_error"] == 5
