# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The filter that turns a role's <prefix>_slurm_api and <prefix>_slurm_rest into module options, and
the key lists the roles still spell out, held equal to the options the code takes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.filter.slurm_api_options import REST_KEYS, slurm_api_options
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import FastFenceConfig
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import SLURM_API_ARGS

REPO = Path(__file__).resolve().parents[4]


def test_rest_settings_become_the_rest_options_and_cli_ones_the_commands():
    rest = {"url": "https://slurm-restapi:6820", "token_file": "/run/secrets/t", "requeue_exit": [75]}
    assert slurm_api_options("rest", rest, "/etc/slurm/slurm.conf", "/opt/bin") == {
        "slurm_api": "rest", "rest_url": "https://slurm-restapi:6820", "rest_token_file": "/run/secrets/t",
        "rest_requeue_exit": [75]}
    # cli ignores the rest settings (the lab fills them in for either api); unset is null: not given.
    assert slurm_api_options("cli", rest, "", "/lab/bin", bin_dir_option="slurm_bin_dir") == {
        "slurm_api": "cli", "slurm_conf": None, "slurm_bin_dir": "/lab/bin"}
    assert slurm_api_options("rest", None) == {"slurm_api": "rest"}
    assert set(REST_KEYS) == {name[len("rest_"):] for name in SLURM_API_ARGS if name.startswith("rest_")}


@pytest.mark.parametrize("api, rest, named", [
    ("grpc", {}, "chaos_drill_slurm_api must be cli or rest"),
    ("rest", {"url": "https://x:6820", "jwt_key": "/k"}, "chaos_drill_slurm_rest takes only url, user"),
    ("rest", "url=https://x:6820", "chaos_drill_slurm_rest must be a dict"),
])
def test_bad_settings_fail_naming_the_variable(api, rest, named):
    with pytest.raises(AnsibleFilterError, match=named):
        slurm_api_options(api, rest, prefix="chaos_drill")


def test_the_key_lists_the_roles_spell_out_are_the_ones_the_code_takes():
    validate = yaml.safe_load((REPO / "roles/remediation/tasks/validate.yml").read_text())
    remediation = next(task["vars"]["remediation__slurm_rest_keys"] for task in validate
                       if "remediation__slurm_rest_keys" in (task.get("vars") or {}))
    assert sorted(remediation) == sorted(REST_KEYS)
    agent_vars = yaml.safe_load((REPO / "roles/health_agent/vars/main.yml").read_text())
    fence_fields = [name[len("rest_"):] for name in FastFenceConfig.__dataclass_fields__ if name.startswith("rest_")]
    assert sorted(agent_vars["health_agent__fast_fence_rest_keys"]) == sorted(fence_fields)
