"""The two run functions: subprocess (agent) and AnsibleModule.run_command (modules).

subprocess_run runs real programs (sh, sleep), not Slurm; module_run_function is checked
against a recorder of the run_command arguments it passes.
"""

from __future__ import annotations

import shutil

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmTimeoutError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import (
    SlurmRunner,
    module_run_function,
    subprocess_run,
)


def test_subprocess_run_passes_env_and_output():
    rc, out, err = subprocess_run(["sh", "-c", 'echo "$LC_ALL $SLURM_CONF"; echo oops >&2; exit 3'],
                                  {"LC_ALL": "C", "SLURM_CONF": "/lab/slurm.conf"}, 10)
    assert (rc, out, err) == (3, "C /lab/slurm.conf\n", "oops\n")


def test_subprocess_run_timeout():
    with pytest.raises(TimeoutError):
        subprocess_run(["sleep", "5"], {}, 0.2)


def test_runner_with_subprocess_turns_failures_into_typed_errors(tmp_path):
    runner = SlurmRunner(bin_dir=str(tmp_path), timeout=0.3)
    with pytest.raises(SlurmCommandError) as missing:
        runner.run("scontrol", "action", action=["ping"])
    assert missing.value.rc is None and missing.value.argv == [str(tmp_path / "scontrol"), "ping"]
    slow = tmp_path / "scontrol"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    with pytest.raises(SlurmTimeoutError) as late:
        runner.run("scontrol", "action", action=["ping"])
    assert late.value.timeout == 0.3 and "timed out after 0.3s" in str(late.value)


class RecordingModule:
    """Records what the adapter passes to run_command; answers with a fixed result."""

    def __init__(self, result, timeout_bin="/usr/bin/timeout"):
        self.result = result
        self.timeout_bin = timeout_bin
        self.calls = []

    def get_bin_path(self, name):
        return self.timeout_bin if name == "timeout" else None

    def run_command(self, args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result


def test_module_run_function_keeps_text_literal_and_wraps_timeout():
    module = RecordingModule((0, "out", "err"))
    run = module_run_function(module)
    assert run(["scontrol", "update", "Reason=$HOME ~x"], {"LC_ALL": "C"}, 7.5) == (0, "out", "err")
    args, kwargs = module.calls[0]
    assert args == ["/usr/bin/timeout", "--kill-after=5", "7.5", "scontrol", "update", "Reason=$HOME ~x"]
    assert kwargs == dict(environ_update={"LC_ALL": "C"}, check_rc=False, expand_user_and_vars=False,
                          handle_exceptions=False)


def test_module_run_function_timeout_and_no_timeout_binary():
    with pytest.raises(TimeoutError):
        module_run_function(RecordingModule((124, "", "")))(["sinfo"], {}, 1)
    module = RecordingModule((124, "", ""), timeout_bin=None)
    assert module_run_function(module)(["sinfo"], {}, 1) == (124, "", "")
    assert module.calls[0][0] == ["sinfo"]


@pytest.mark.skipif(not shutil.which("timeout"), reason="coreutils timeout not installed")
def test_module_run_function_with_the_real_run_command(monkeypatch):
    """The adapter against ansible-core's real run_command (with sh, not Slurm)."""
    import json

    from ansible.module_utils import basic
    from ansible.module_utils.common.text.converters import to_bytes

    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": {}})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    module = basic.AnsibleModule(argument_spec={})
    run = module_run_function(module)
    assert run(["sh", "-c", 'printf "%s" "$LC_ALL"'], {"LC_ALL": "C"}, 5) == (0, "C", "")
    with pytest.raises(TimeoutError):
        run(["sleep", "5"], {}, 0.3)
