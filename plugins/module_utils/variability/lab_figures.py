# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's figures: its GPUs are simulated, so their performance is the perf_permille that the
fake GPU state carries (module_utils.lab.fake_gpu_state.simulated_perf_permille: a deterministic
spread from the node name and GPU index). Nothing runs on a GPU here."""

from __future__ import annotations

import os
from typing import Dict

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state


class UnmeasurableNode(GpufleetError):
    """The node has no usable figure (a lost GPU, no state): it keeps its placement as it is."""


def lab_figures(gpu_dir: str, node: str, write: bool = True) -> Dict[int, float]:
    """GPU index -> perf_permille of ``<gpu_dir>/<node>``; writes the simulated figure where absent."""
    state_dir = os.path.join(gpu_dir, node)
    if not os.path.isdir(state_dir):
        raise UnmeasurableNode("no fake GPU state at %s" % state_dir)
    try:
        if write:
            fake_gpu_state.fill_simulated_perf(state_dir)
        state = fake_gpu_state.read(state_dir)
    except fake_gpu_state.FakeGpuStateError as exc:
        raise UnmeasurableNode(str(exc)) from None
    lost = [gpu["index"] for gpu in state["gpus"] if gpu["lost"]]
    if lost:
        raise UnmeasurableNode("GPU(s) %s fallen off the bus: no figure" % ", ".join(map(str, lost)))
    # In check mode nothing is written: an absent figure is the one fill_simulated_perf would write.
    return {gpu["index"]: float(gpu["perf_permille"] or fake_gpu_state.simulated_perf_permille(node, gpu["index"]))
            for gpu in state["gpus"]}
