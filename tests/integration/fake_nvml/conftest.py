# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Build the fake libnvidia-ml.so.1 and load it into unmodified pynvml in this process."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Iterator

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state


@pytest.fixture(scope="session")
def preloaded(fake_nvml_lib: Path) -> ctypes.CDLL:
    """Load the library under its soname before pynvml does, so CDLL("libnvidia-ml.so.1") reuses it."""
    return ctypes.CDLL(str(fake_nvml_lib), mode=ctypes.RTLD_GLOBAL)


@pytest.fixture
def node_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A simulated node with 8 healthy H100s, selected for this process through the environment."""
    state_dir = str(tmp_path / "gpus" / "gpu-a-001")
    fake_gpu_state.init(state_dir, 8, "gpu-a-001", "NVIDIA-H100-80GB-HBM3")
    monkeypatch.setenv("GPUFLEET_FAKE_NVML_DIR", state_dir)  # os.environ writes through to getenv()
    return state_dir


@pytest.fixture
def nvml(preloaded: ctypes.CDLL, node_dir: str) -> Iterator[object]:
    """pynvml, initialised against node_dir."""
    import pynvml

    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()
