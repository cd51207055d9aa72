# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Reading a burn's output: gpu-burn's and ``dcgmi diag``'s, as the Slurm ``--output`` file or the
Pod's log holds it, and nccl-tests' ``all_reduce_perf`` (a bandwidth check, not a burn). Pure:
text in, a verdict and per-GPU results out (the I/O is ``burn.py``).

gpu-burn exits 0 even when a GPU is FAULTY: ``parse_gpu_burn`` reads its ``GPU i: OK|FAULTY``
result lines, and a run without them is ``unknown``, never OK.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

TOOLS = ("gpu_burn", "dcgm_diag")

_BURN_RESULT = re.compile(r"\s*GPU\s+(\d+):\s+(OK|FAULTY)\s*")
_BURN_TESTED = re.compile(r"Tested\s+(\d+)\s+GPUs?")
# One progress record; a line may hold more than one (gpu-burn rewrites the line with \r, and
# other messages can run into it).
_BURN_PROGRESS = re.compile(r"(?P<pct>\d+(?:\.\d+)?)%\s+proc'd:(?P<procd>.*?)errors:(?P<errors>.*?)temps:"
                            r"(?P<temps>\s*-?\d+\s*C(?:\s*-\s*-?\d+\s*C)*)")
_BURN_PROCD = re.compile(r"(-?\d+)\s*\(\s*(\d+(?:\.\d+)?)\s*Gflop/s\)")
_BURN_ERRORS = re.compile(r"(-?\d+)\s*(\((?:WARNING|DIED)!\))?")
_BURN_TEMP = re.compile(r"(-?\d+)\s*C")
_BURN_FAILED_START = re.compile(r"Couldn't init a GPU test|No clients are alive")


def parse_gpu_burn(text: str) -> Dict[str, Any]:
    """gpu-burn's output -> per-GPU result and a verdict; its exit code says nothing (always 0).

    ``verdict``: ``faulty`` (a GPU printed FAULTY), ``unknown`` (no result lines, or fewer than
    ``Tested N GPUs``: the burn was cut short), ``error`` (every GPU printed OK, yet a test process
    failed to start or died: gpu-burn still prints OK then), ``ok``.
    """
    gpus: Dict[int, str] = {}
    tested: Optional[int] = None
    failed_start: List[str] = []
    last: Optional[Any] = None
    for line in (text or "").replace("\r", "\n").splitlines():
        match = _BURN_RESULT.fullmatch(line)
        if match:
            gpus[int(match.group(1))] = match.group(2)
            continue
        match = _BURN_TESTED.search(line)
        if match:
            tested = int(match.group(1))
        if _BURN_FAILED_START.search(line):
            failed_start.append(line.strip())
        for progress in _BURN_PROGRESS.finditer(line):
            last = progress
    processed: List[int] = []
    gflops: List[float] = []
    errors: List[int] = []
    died: List[int] = []
    temps: List[int] = []
    percent: Optional[float] = None
    if last is not None:
        percent = float(last.group("pct"))
        for count, rate in _BURN_PROCD.findall(last.group("procd")):
            processed.append(int(count))
            gflops.append(float(rate))
        for index, (count, flag) in enumerate(_BURN_ERRORS.findall(last.group("errors"))):
            errors.append(int(count))
            if flag == "(DIED!)":
                died.append(index)
        temps = [int(value) for value in _BURN_TEMP.findall(last.group("temps"))]
    faulty = sorted(gpu for gpu, status in gpus.items() if status == "FAULTY")
    reasons: List[str] = []
    if faulty:
        verdict = "faulty"
        reasons.append("GPU(s) %s FAULTY: wrong results under load" % ", ".join(map(str, faulty)))
    elif not gpus:
        verdict = "unknown"
        reasons.append("no 'GPU i: OK|FAULTY' result lines: the burn did not finish, or its output was cut")
    elif failed_start or died:
        verdict = "error"
        reasons += failed_start
        if died:
            reasons.append("test process of GPU(s) %s died" % ", ".join(map(str, died)))
    elif tested is not None and len(gpus) < tested:
        verdict = "unknown"
        reasons.append("%d result line(s) for %d tested GPUs" % (len(gpus), tested))
    else:
        verdict = "ok"
    return {"tool": "gpu_burn", "gpus": gpus, "faulty": faulty, "tested": tested, "errors": errors,
            "gflops": gflops, "processed": processed, "temps": temps, "died": died, "progress": percent,
            "verdict": verdict, "reasons": reasons}


# dcgmi diag's text table (DCGM 3.x and 4.x): "| <test> | <result> |" rows under section rows
# such as "+-----  Hardware  ---+---+"; results are Pass, Fail, Warn or Skip, for all GPUs
# ("Pass - All"), some ("Fail - GPU: 0"), or one per continuation row ("GPU0: Pass", 4.x).
# "Warning" and "Info" rows, and the wrapped rows under them, are details of the test above.
_DIAG_SECTION = re.compile(r"^[|+]-{3,}\s+(\S(?:.*?\S)?)\s+-{3,}")
_DIAG_RESULT = re.compile(r"(pass|fail|warn|skip)\w*(?:\s*-\s*(all|gpus?\s*:\s*([\d,\s]+)))?\s*", re.I)
_DIAG_GPU_RESULT = re.compile(r"gpu\s*(\d+)\s*:\s*(pass|fail|warn|skip)\w*\s*", re.I)
# Not a prefix match: "Inforom" is a test (3.x), "Info" a detail row.
_DIAG_DETAIL = re.compile(r"^(warning|info)\b", re.I)
_DIAG_RANK = {"Skip": 0, "Pass": 1, "Warn": 2, "Fail": 3}


def _diag_result(value: str) -> Optional[Tuple[str, Optional[List[int]]]]:
    """('Fail', [0]) for 'Fail - GPU: 0', ('Pass', None) for 'Pass' or 'Pass - All'."""
    match = _DIAG_RESULT.fullmatch(value)
    if match:
        result = match.group(1).capitalize()
        gpus = [int(part) for part in re.findall(r"\d+", match.group(3) or "")] or None
        return result, gpus
    match = _DIAG_GPU_RESULT.fullmatch(value)
    if match:
        return match.group(2).capitalize(), [int(match.group(1))]
    return None


def parse_dcgm_diag(text: str) -> Dict[str, Any]:
    """``dcgmi diag -r 3`` text output -> each test's result (per GPU where it says) and a verdict.

    ``verdict``: ``fail`` (any test Fail), ``warn``, ``pass`` (at least one Pass, no Fail or Warn),
    ``unknown`` (no result rows, or every test skipped: nothing was tested).
    """
    tests: List[Dict[str, Any]] = []
    metadata: Dict[str, str] = {}
    errors: List[str] = []
    section: Optional[str] = None
    current: Optional[Dict[str, Any]] = None
    detail: Optional[List[str]] = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line[0] not in "|+":
            if line.lower().startswith("error"):
                errors.append(line)
            continue
        match = _DIAG_SECTION.match(line)
        if match:
            section, current, detail = match.group(1), None, None
            continue
        if line[0] == "+":
            continue  # a border: +-----+ or +=====+
        parts = line.split("|")
        if len(parts) < 4:
            continue
        name, cell = parts[1].strip(), "|".join(parts[2:-1])
        value = cell.strip()
        if name == "Diagnostic" and value == "Result":
            continue
        match = _DIAG_DETAIL.match(name)
        if match:
            if current is not None:
                detail = current["warnings" if match.group(1).lower() == "warning" else "info"]
                detail.append(cell[1:].rstrip())
            continue
        parsed = _diag_result(value)
        if not name:
            if parsed is not None and current is not None:
                _diag_add(current, parsed)
                detail = None
            elif detail is not None:
                # A long detail is cut into rows at a fixed width, mid-word too: pad each row back
                # to that width before the next one, and the words come out whole.
                detail[-1] = detail[-1].ljust(max(len(cell) - 3, 0)) + cell[1:].rstrip()
            continue
        if section == "Metadata" or parsed is None:
            metadata[name] = value
            current, detail = None, None
            continue
        current = {"name": name, "section": section, "result": parsed[0], "gpus": {}, "warnings": [], "info": []}
        detail = None
        _diag_add(current, parsed)
        tests.append(current)
    by_result: Dict[str, List[str]] = {"Fail": [], "Warn": [], "Pass": [], "Skip": []}
    for test in tests:
        by_result[test["result"]].append(test["name"])
        for key in ("warnings", "info"):
            test[key] = [" ".join(item.split()) for item in test[key]]
    if by_result["Fail"]:
        verdict = "fail"
    elif by_result["Warn"]:
        verdict = "warn"
    elif by_result["Pass"]:
        verdict = "pass"
    else:
        verdict = "unknown"
    return {"tool": "dcgm_diag", "tests": tests, "failed": by_result["Fail"], "warned": by_result["Warn"],
            "passed": by_result["Pass"], "skipped": by_result["Skip"], "metadata": metadata, "errors": errors,
            "verdict": verdict}


def _diag_add(test: Dict[str, Any], parsed: Tuple[str, Optional[List[int]]]) -> None:
    result, gpus = parsed
    for gpu in gpus or []:
        test["gpus"][gpu] = result
    # The test's result is its worst: 'Pass - GPU: 1' then 'Fail - GPU: 0' is a Fail.
    if _DIAG_RANK[result] > _DIAG_RANK[test["result"]]:
        test["result"] = result


def parse_output(text: str, tool: str = "gpu_burn") -> Dict[str, Any]:
    """The burn job's output (the Slurm --output file, the Pod's log) read with its tool's parser."""
    if tool not in TOOLS:
        raise FieldError("tool", "must be one of %s, not %r" % (", ".join(TOOLS), tool))
    return parse_dcgm_diag(text) if tool == "dcgm_diag" else parse_gpu_burn(text)


# nccl-tests' summary lines: the average bus bandwidth over the sizes run, and its check of the results.
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>[0-9.]+(?:[eE][-+]?[0-9]+)?)", re.M)
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<count>[0-9]+)\s*(?P<verdict>\w+)?", re.M)


def parse_all_reduce_perf(text: str) -> Dict[str, Any]:
    """nccl-tests' summary: ``# Avg bus bandwidth : N`` (GB/s, over the sizes run), the rows
    (size, time and bus bandwidth out of place and in place) and the ``# Out of bounds values``
    check. ``avg_busbw_gbps`` is None when the run printed no summary (it failed)."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 13 or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        try:
            rows.append({"size_bytes": int(fields[0]), "count": int(fields[1]), "type": fields[2], "redop": fields[3],
                         "time_us": float(fields[5]), "algbw_gbps": float(fields[6]), "busbw_gbps": float(fields[7]),
                         "wrong": fields[8], "in_place_time_us": float(fields[9]),
                         "in_place_busbw_gbps": float(fields[11]), "in_place_wrong": fields[12]})
        except ValueError:
            continue
    average = _AVG_BUSBW.search(text)
    bounds = _OUT_OF_BOUNDS.search(text)
    return {
        "avg_busbw_gbps": float(average.group("value")) if average else None,
        "out_of_bounds": int(bounds.group("count")) if bounds else None,
        "ok": bool(bounds and bounds.group("count") == "0") if bounds else None,
        "rows": rows,
    }


def nccl_verdict(parsed: Mapping[str, Any]) -> str:
    """``ok`` (a summary, every value in bounds), ``fail`` (values out of bounds: a GPU or link computed
    or carried wrong data), ``unknown`` (no summary: the run failed or was cut short)."""
    if parsed.get("avg_busbw_gbps") is None:
        return "unknown"
    return "fail" if parsed.get("ok") is False else "ok"


# Verdicts that say the node is not fit for work (gpu-burn's wrong results or dead test process,
# a failed DCGM test).
UNFIT = ("faulty", "error", "fail")


def summary(result: Mapping[str, Any]) -> Dict[str, Any]:
    """What a drill report keeps of a parsed output: the tool, its verdict and why."""
    if result.get("tool") == "dcgm_diag":
        why = ", ".join("%s failed" % name for name in result.get("failed") or []) or ", ".join(
            "%s warned" % name for name in result.get("warned") or [])
    else:
        why = "; ".join(result.get("reasons") or [])
    return {"tool": result.get("tool"), "verdict": result.get("verdict"), "why": why or "-"}
