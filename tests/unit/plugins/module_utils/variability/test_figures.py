# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Per-GPU figures out of gpu-burn's and dcgmi diag's output, as the tools print them."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.variability import figures

# gpu-burn (wilicc/gpu-burn) on two H100s: the progress line is rewritten with \r; the first
# records are the warm-up, slower than the steady state.
BURN = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0c6e4a57-0000-0000-0000-000000000000)\n"
    "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-0c6e4a57-0000-0000-0000-000000000001)\n"
    "Initialized device 0 with 81090 MB of memory (80560 MB available, using 72504 MB of it), using DOUBLES\n"
    "Initialized device 1 with 81090 MB of memory (80560 MB available, using 72504 MB of it), using DOUBLES\n"
    "10.0%  proc'd: 240 (20110 Gflop/s) - 230 (19850 Gflop/s)   errors: 0 - 0   temps: 45 C - 46 C \r"
    "20.0%  proc'd: 600 (39020 Gflop/s) - 570 (38010 Gflop/s)   errors: 0 - 0   temps: 52 C - 54 C \r"
    "60.0%  proc'd: 1440 (41210 Gflop/s) - 1380 (38871 Gflop/s)   errors: 0 - 0   temps: 61 C - 63 C \r"
    "80.0%  proc'd: 1920 (41002 Gflop/s) - 1840 (38512 Gflop/s)   errors: 0 - 0   temps: 65 C - 67 C \r"
    "100.0%  proc'd: 2400 (41100 Gflop/s) - 2310 (38700 Gflop/s)   errors: 0 - 0   temps: 66 C - 68 C \n"
    "Killing processes.. done\n\nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n"
)

# dcgmi diag -r 3 (DCGM 3.x text table): the Diagnostic test's info rows carry one figure per GPU,
# and a long message wraps onto the next row.
DIAG_TEXT = """\
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
| Number of GPUs Detected   | 2                                              |
|-----  Stress  ------------+------------------------------------------------|
| Diagnostic                | Pass - All                                     |
|   Info                    | GPU 0 calculated at approximately 41123.45     |
|                           | gigaflops during this test                     |
|   Info                    | GPU 1 calculated at approximately 39876.10     |
|                           | gigaflops during this test                     |
| Targeted Stress           | Pass - All                                     |
+---------------------------+------------------------------------------------+
"""

DIAG_JSON = json.dumps({"category": "Stress", "tests": [{"name": "Diagnostic", "results": [
    {"gpu_ids": "0", "status": "Pass", "info": "GPU 0 calculated at approximately 41123.45 gigaflops during this test"},
    {"gpu_ids": "1", "status": "Pass", "info": "GPU 1 calculated at approximately 39876.1 gigaflops during this test"},
]}]})


def test_gpu_burn_takes_the_median_of_the_steady_half() -> None:
    # Records 60 %, 80 %, 100 % are the second half; the warm-up 10 % and 20 % do not count.
    assert figures.gpu_burn_figures(BURN) == {0: 41100.0, 1: 38700.0}


def test_gpu_burn_faulty_gpu_has_no_valid_figure() -> None:
    with pytest.raises(FieldError) as err:
        figures.gpu_burn_figures(BURN.replace("GPU 1: OK", "GPU 1: FAULTY"), "measurements[2].output")
    assert err.value.field == "measurements[2].output"
    assert "GPU(s) 1 FAULTY" in str(err.value)


def test_gpu_burn_without_progress_is_refused() -> None:
    with pytest.raises(FieldError, match="no gpu-burn progress records"):
        figures.gpu_burn_figures("Couldn't init a GPU test: CUDA error\n")


def test_dcgmi_text_with_wrapped_rows() -> None:
    # Both messages wrap onto a continuation row whose first column is empty.
    assert figures.dcgmi_diag_figures(DIAG_TEXT) == {0: 41123.45, 1: 39876.10}


def test_dcgmi_json() -> None:
    assert figures.dcgmi_diag_figures(DIAG_JSON) == {0: 41123.45, 1: 39876.1}


def test_dcgmi_without_figures_is_refused() -> None:
    with pytest.raises(FieldError, match="dcgmi diag -r 3"):
        figures.dcgmi_diag_figures("| Diagnostic | Skip - All |\n", "measurements[0].output")
