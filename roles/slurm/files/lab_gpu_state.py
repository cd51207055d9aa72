# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Reading a simulated node's GPUs, for the lab's stand-ins of GPU tools that run as Slurm jobs
(gpu_burn_sim, all_reduce_perf_sim), which import it from beside them in ``<lab>/bin``.

The state directory is the fake NVML's: ``node.state`` (``count=<GPUs>``) and one
``gpu<i>.state`` of ``key=value`` lines per GPU (plugins/module_utils/lab/fake_gpu_state.py writes
them). Standard library only: the lab's job Python runs it.
"""

import os


def read_state(path):
    values = {}
    with open(path, encoding="ascii") as handle:
        for line in handle:
            key, sep, value = line.strip().partition("=")
            if sep:
                values[key] = value
    return values


def read_gpus(state_dir, limit=None):
    """Each GPU's state, in index order (the first ``limit`` of them when given)."""
    count = number(read_state(os.path.join(state_dir, "node.state")), "count")
    if limit is not None:
        count = min(count, limit)
    return [read_state(os.path.join(state_dir, "gpu%d.state" % gpu)) for gpu in range(count)]


def number(state, key, default=0):
    try:
        return int(state.get(key) or default)
    except ValueError:
        return default


def flag(state, key):
    return (state.get(key) or "").lower() in ("1", "true", "yes")
