# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Read the agent's configuration file (the I/O half of ``config``)."""

from __future__ import annotations

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import AgentConfig, parse_config
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.sense import build_thresholds
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.agent_client import load_credentials


class ConfigError(GpufleetError):
    """The configuration file is missing, not YAML, or has a bad key."""


def load_config(path: str) -> AgentConfig:
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError("%s: cannot read: %s" % (path, exc.strerror or exc)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError("%s: not valid YAML: %s" % (path, exc)) from exc
    try:
        config = parse_config(raw)
        build_thresholds(config.thresholds)  # the same checks gpu_health makes
    except GpufleetError as exc:
        raise ConfigError(str(exc)) from exc
    if config.kubernetes.enabled and config.kubernetes.kubeconfig:
        try:  # refuse credentials the agent cannot use now, not at the first fault
            load_credentials(config.kubernetes.kubeconfig, config.kubernetes.context)
        except GpufleetError as exc:
            raise ConfigError("kubernetes.kubeconfig: %s" % exc) from exc
    return config
