# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Per-GPU performance figures out of a burn's or a diagnostic's output (pure: text in, figures out).

Formats, as the tools print them:

* gpu-burn (github.com/wilicc/gpu-burn, ``gpu_burn.cpp``): progress records
  ``50.0%  proc'd: 1200 (41210 Gflop/s) - 1140 (40871 Gflop/s)   errors: 0 - 0   temps: 61 C - 63 C``,
  one ``count (rate Gflop/s)`` per GPU in device order, rewritten in place with ``\\r``; then
  ``GPU i: OK|FAULTY`` result lines. The first records are warm-up (clocks still ramping), so a
  GPU's figure is the median of its rates over the second half of the records.
* ``dcgmi diag -r 3`` (DCGM's Diagnostic / SM stress plugin): an info message per GPU,
  ``GPU 0 calculated at approximately 41123.45 gigaflops during this test``, in the text table
  (possibly wrapped over table rows) and in ``-j`` JSON alike, so the message is searched for in
  the whole text with the table's row breaks removed.

A GPU that gpu-burn calls FAULTY has no figure worth ranking: its wrong results make any rate
meaningless, so it is reported, not measured.
"""

from __future__ import annotations

import re
import statistics
from typing import Dict, List

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

_BURN_PROGRESS = re.compile(r"\d+(?:\.\d+)?%\s+proc'd:(?P<procd>.*?)errors:")
_BURN_RATE = re.compile(r"-?\d+\s*\(\s*(\d+(?:\.\d+)?)\s*Gflop/s\)")
_BURN_RESULT = re.compile(r"^\s*GPU\s+(\d+):\s+(OK|FAULTY)\s*$", re.M)
_DCGM_FIGURE = re.compile(r"GPU\s+(\d+)\s+calculated\s+at\s+approximately\s+(\d+(?:\.\d+)?)\s+gigaflops", re.I)


def gpu_burn_figures(text: str, field: str = "output") -> Dict[int, float]:
    """GPU index -> Gflop/s from gpu-burn's output; FieldError(field) when it has no figures or a FAULTY GPU."""
    text = (text or "").replace("\r", "\n")
    faulty = sorted(int(gpu) for gpu, status in _BURN_RESULT.findall(text) if status == "FAULTY")
    if faulty:
        raise FieldError(field, "gpu-burn reports GPU(s) %s FAULTY: no figure is valid; remediate first"
                         % ", ".join(map(str, faulty)))
    records: List[List[float]] = []
    for progress in _BURN_PROGRESS.finditer(text):
        rates = [float(rate) for rate in _BURN_RATE.findall(progress.group("procd"))]
        if rates:
            records.append(rates)
    if not records:
        raise FieldError(field, "no gpu-burn progress records with Gflop/s figures (was the output cut?)")
    steady = records[len(records) // 2:]
    count = max(len(record) for record in steady)
    return {gpu: statistics.median(record[gpu] for record in steady if len(record) > gpu) for gpu in range(count)}


def dcgmi_diag_figures(text: str, field: str = "output") -> Dict[int, float]:
    """GPU index -> gigaflops from ``dcgmi diag -r 3`` (text or JSON); FieldError(field) when it has none."""
    # The text table wraps long messages over rows: "| Info | ... approximately 41123.45 |\n|      | gigaflops ...".
    # A continuation row has an empty first column: drop the row break and that column.
    flat = re.sub(r"[ \t]*\|[ \t]*\n[ \t]*\|[ \t]*\|[ \t]*", " ", text or "")
    flat = re.sub(r"\s+", " ", flat)
    figures: Dict[int, float] = {}
    for gpu, value in _DCGM_FIGURE.findall(flat):
        figures[int(gpu)] = float(value)
    if not figures:
        raise FieldError(field, "no 'GPU i calculated at approximately N gigaflops' message: run dcgmi diag -r 3")
    return dict(sorted(figures.items()))
