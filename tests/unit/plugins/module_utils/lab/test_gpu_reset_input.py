# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 10: gpu_reset took an absolute path or ``-oProxyCommand=...`` as a node, and
filled it into ``ssh {node} nvidia-smi -r``."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.gpu_reset import reset_argv, reset_lab_gpu

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
