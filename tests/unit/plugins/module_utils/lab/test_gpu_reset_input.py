# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 10: gpu_reset took an absolute path or ``-oProxyCommand=...`` as a node, and
filled it into ``ssh {node} nvidia-smi -r``."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.gpu_reset import (
    CommandFailed,
    reset_argv,
    reset_by_command,
    reset_lab_gpu,
)

SSH = ["ssh", "{node}", "nvidia-smi", "-r", "-i", "{gpu}"]


@pytest.mark.parametrize("node", ["-oProxyCommand=touch /tmp/pwned", "/etc/passwd", "../gpu-a-001", "",
                                  "gpu-a-001\n", "x" * 5000, "gpu-a-001 -v"])
def test_a_node_that_is_not_a_node_name_is_refused(node, tmp_path) -> None:
    with pytest.raises(FieldError) as bad:
        reset_argv(SSH, node, 3)
    assert bad.value.field == "node"
    with pytest.raises(FieldError) as lab:
        reset_lab_gpu(str(tmp_path), node, None, check_mode=True)
    assert lab.value.field == "node"


@pytest.mark.parametrize(("gpu", "field"), [(-1, "gpu"), (32, "gpu"), ("3; id", "gpu"), (True, "gpu")])
def test_a_gpu_index_out_of_range_is_refused(gpu, field) -> None:
    with pytest.raises(FieldError) as bad:
        reset_argv(SSH, "gpu-a-001", gpu)
    assert bad.value.field == field


def test_the_argv_is_filled_in() -> None:
    assert reset_argv(SSH, "gpu-a-001", 3) == ["ssh", "gpu-a-001", "nvidia-smi", "-r", "-i", "3"]
    assert reset_argv(SSH, "gpu-a-001", None)[-1] == "0"
    with pytest.raises(FieldError, match="command"):
        reset_argv([], "gpu-a-001", 0)
    with pytest.raises(FieldError) as word:
        reset_argv(["ssh", "{node}\nid"], "gpu-a-001", 0)
    assert word.value.field == "command[1]"


def test_the_command_backend_resets_then_tells_the_agent(tmp_path) -> None:
    order = tmp_path / "order"
    result = reset_by_command(["sh", "-c", "echo reset $0 $1 >> %s" % order, "{node}", "{gpu}"],
                              ["sh", "-c", "echo told $0 >> %s" % order, "{node}"], "gpu-a-003", 3, 30)
    assert order.read_text().splitlines() == ["reset gpu-a-003 3", "told gpu-a-003"]
    assert result["agent_told"] is True and result["warnings"] == [] and len(result["actions"]) == 2


def test_check_mode_runs_nothing_and_says_both_commands(tmp_path) -> None:
    marker = tmp_path / "ran"
    result = reset_by_command(["touch", str(marker)], ["touch", str(marker)], "gpu-a-003", None, 30, check_mode=True)
    assert not marker.exists()
    assert result["actions"] == ["would run: touch %s" % marker] * 2


def test_without_an_agent_command_it_warns_that_the_node_stays_fatal(tmp_path) -> None:
    result = reset_by_command(["true"], [], "gpu-a-003", 0, 30)
    assert result["agent_told"] is False
    assert "agent_command is empty" in result["warnings"][0] and "gpu-a-003" in result["warnings"][0]


def test_a_failed_reset_does_not_tell_the_agent(tmp_path) -> None:
    marker = tmp_path / "told"
    with pytest.raises(CommandFailed, match=r"the GPU reset command failed \(rc 3\): no GPU") as failed:
        reset_by_command(["sh", "-c", "echo no GPU >&2; exit 3"], ["touch", str(marker)], "gpu-a-003", 0, 30)
    assert failed.value.rc == 3 and not marker.exists()


def test_a_command_that_hangs_fails_within_the_timeout(tmp_path) -> None:
    with pytest.raises(CommandFailed, match=r"the agent command did not finish within 1s: sleep 30"):
        reset_by_command(["true"], ["sleep", "30"], "gpu-a-003", 0, 1)
    with pytest.raises(CommandFailed, match="the GPU reset command could not start"):
        reset_by_command([str(tmp_path / "missing")], [], "gpu-a-003", 0, 5)


@pytest.mark.parametrize(("agent_command", "timeout", "field"), [
    (["ssh", "{node}\nid"], 30, "agent_command[1]"), (["true"], 0, "timeout"), (["true"], "x", "timeout")])
def test_bad_agent_command_or_timeout_is_refused_before_anything_runs(tmp_path, agent_command, timeout, field) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(FieldError) as bad:
        reset_by_command(["touch", str(marker)], agent_command, "gpu-a-003", 0, timeout)
    assert bad.value.field == field and not marker.exists()
