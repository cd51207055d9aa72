"""The NVML reader's mapping of NVML errors to domain results.

The exceptions are pynvml's own (``pynvml.NVMLError(code)`` builds the same
subclass the library raises for that return code), so this tests our mapping,
not a model of NVML.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pynvml
import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health import nvml
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError


def raising(code):
    def call():
        raise pynvml.NVMLError(code)

    return call


def test_return_codes_match_nvml_h():
    assert nvml.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml.NVML_ERROR_GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST
    assert nvml.NVML_ERROR_TIMEOUT == pynvml.NVML_ERROR_TIMEOUT
    assert nvml.NVML_ERROR_LIBRARY_NOT_FOUND == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert nvml.NVML_ERROR_FUNCTION_NOT_FOUND == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    assert nvml.NVML_ERROR_DRIVER_NOT_LOADED == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert nvml.NVML_ERROR_INVALID_ARGUMENT == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert pynvml.nvmlEventTypeXidCriticalError == nvml.XID_CRITICAL_ERROR_EVENT


def test_value_passes_through():
    assert nvml.field_or_absent(lambda: 41) == 41


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND])
def test_unsupported_field_is_absent_not_an_error(code):
    assert nvml.field_or_absent(raising(code)) is None


def test_gpu_is_lost_is_never_read_as_no_data():
    with pytest.raises(nvml.GpuLost):
        nvml.field_or_absent(raising(pynvml.NVML_ERROR_GPU_IS_LOST))


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_NO_PERMISSION, 4242])
def test_other_nvml_errors_are_typed_health_errors(code):
    with pytest.raises(nvml.NvmlError) as caught:
        nvml.field_or_absent(raising(code))
    assert isinstance(caught.value, HealthError)
    assert str(code) in str(caught.value)


def test_programming_errors_are_not_swallowed():
    def broken():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        nvml.field_or_absent(broken)


def test_library_path_that_does_not_exist(tmp_path):
    reader = nvml.NvmlReader(library_path=str(tmp_path / "libnvidia-ml.so.1"))
    with pytest.raises(nvml.NvmlUnavailable, match="cannot load NVML library"):
        reader.open()


def test_missing_driver_library_gives_a_clear_error(tmp_path):
    # A fresh interpreter with an empty loader path: pynvml cannot find
    # libnvidia-ml.so.1 at all (this machine has no NVIDIA driver).
    script = (
        "from ansible_collections.gpufleet.resilience.plugins.module_utils.health import nvml\n"
        "try:\n"
        "    nvml.NvmlReader().open()\n"
        "except nvml.NvmlUnavailable as exc:\n"
        "    print('UNAVAILABLE', exc)\n"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("LD_PRELOAD", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    if "UNAVAILABLE" not in done.stdout:
        pytest.fail("expected NvmlUnavailable, got: " + done.stdout + done.stderr)
    assert "libnvidia-ml.so.1 not found" in done.stdout
