# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The pure half of the NCCL environment family: which variables are acceptable, and how they are
written into the two file formats (``health/burn_output.py`` reads ``all_reduce_perf``'s output).

* ``/etc/nccl.conf`` (and ``$NCCL_CONF_FILE``, NCCL >= 2.23): ``NAME=value`` lines; NCCL reads it
  at communicator init, and a variable already in the job's environment wins over the file.
* The TaskProlog drop-in: ``export NAME=value`` lines, which a Slurm TaskProlog prints and
  slurmstepd applies to the task's environment (Slurm's prolog_epilog guide: ``export``,
  ``unset`` and ``print`` lines of its standard output).

Values are written unquoted into a file a shell script reads, so they are held to a character
set that needs no quoting: NCCL's own syntax (``^LL128``, ``=eth0``, ``mlx5_0:1,mlx5_1:1``,
paths) fits it; spaces, quotes, ``$``, backquotes, ``;`` and newlines do not.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

NAME = re.compile(r"NCCL_[A-Z0-9_]{1,60}")
VALUE = re.compile(r"[A-Za-z0-9_.,:/=+@%^~-]{1,256}")
MAX_VARS = 32
# One line of either format: optional "export ", the name, "=", the rest of the line.
_LINE = re.compile(r"(?P<export>export[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)")


def check_vars(given: Any) -> Dict[str, str]:
    """``params.vars`` -> {NAME: value} as strings, or FieldError naming the bad entry."""
    if not isinstance(given, Mapping) or not given:
        raise FieldError("params.vars", "name the NCCL variables to set, e.g. {NCCL_ALGO: Ring, NCCL_IB_DISABLE: 1}")
    if len(given) > MAX_VARS:
        raise FieldError("params.vars", "at most %d variables, got %d" % (MAX_VARS, len(given)))
    checked: Dict[str, str] = {}
    for name, value in given.items():
        field = "params.vars.%s" % name
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise FieldError(field, "a variable name is NCCL_ followed by capitals, digits and underscores")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise FieldError(field, "must be a string or a number (write 1 or 0, not true or false), got %r" % (value,))
        text = str(value)
        if not VALUE.fullmatch(text):
            raise FieldError(field, "must be 1 to 256 of A-Z a-z 0-9 _ . , : / = + @ %% ^ ~ - (no spaces, quotes, "
                                    "shell characters or newlines), got %r" % text)
        checked[name] = text
    return checked


def line_for(name: str, value: str, export: bool) -> str:
    return "%s%s=%s" % ("export " if export else "", name, value)


def merge(previous: Optional[bytes], wanted: Mapping[str, str], export: bool) -> bytes:
    """The file with ``wanted`` set: a line that sets one of them is replaced in place (each name
    once: later duplicates go, as the last one would have won), the others are appended. Every
    other byte (comments, other variables, blank lines) stays as it was."""
    text = (previous or b"").decode("utf-8", errors="surrogateescape")
    lines = text.splitlines(keepends=True)
    out: List[str] = []
    done: Dict[str, bool] = {}
    for line in lines:
        match = _LINE.fullmatch(line.rstrip("\r\n"))
        name = match.group("name") if match else None
        if name in wanted:
            if not done.get(name):
                ending = line[len(line.rstrip("\r\n")):] or "\n"
                out.append(line_for(name, wanted[name], export) + ending)
                done[name] = True
            continue
        out.append(line)
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    out += [line_for(name, value, export) + "\n" for name, value in wanted.items() if not done.get(name)]
    return "".join(out).encode("utf-8", errors="surrogateescape")


def parse_settings(content: bytes) -> Dict[str, str]:
    """What a file of either format sets (the last line for a name wins, as it does for NCCL and sh)."""
    found: Dict[str, str] = {}
    for line in content.decode("utf-8", errors="replace").splitlines():
        match = _LINE.fullmatch(line.strip())
        if match:
            found[match.group("name")] = match.group("value")
    return found


def parse_env_output(text: str) -> Dict[str, str]:
    """``env`` output (a job's), the NCCL_ variables only."""
    found = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and NAME.fullmatch(name):
            found[name] = value
    return found


def describe_bandwidth(before: Optional[float], during: Optional[float]) -> str:
    if before is None or during is None:
        return "bus bandwidth: before %s, during %s" % (_gbps(before), _gbps(during))
    change = 100.0 * (during - before) / before if before else 0.0
    return "bus bandwidth (all_reduce_perf): before %s, during %s (%+.1f%%)" % (_gbps(before), _gbps(during), change)


def _gbps(value: Optional[float]) -> str:
    return "not measured" if value is None else "%.2f GB/s" % value
