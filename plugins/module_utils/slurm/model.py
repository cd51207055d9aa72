# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What the Slurm client returns: nodes, jobs and the version, plus the small pure helpers the
parsers share (node states, host lists, GPU counts).

A node state is a base state (``IDLE``, ``MIXED``, ``ALLOCATED``, ``DOWN``, ``FUTURE``,
``UNKNOWN``, ``ERROR``) plus flags (``DRAIN``, ``NOT_RESPONDING``, ``COMPLETING``, ...), the way
Slurm keeps it and the way ``--json`` prints it. Text output squeezes the same thing into
``IDLE+DRAIN`` (scontrol), ``drained`` or ``drain`` (sinfo) and a suffix such as ``*`` (not
responding); ``split_state`` maps all of them back.

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

BASE_STATES = ("UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE")

# The one-character suffixes sinfo and old scontrol append to a state, and the flag each means.
STATE_SUFFIXES = (
    ("*", "NOT_RESPONDING"),
    ("~", "POWERED_DOWN"),
    ("#", "POWERING_UP"),
    ("%", "POWERING_DOWN"),
    ("!", "POWER_DOWN"),
    ("$", "MAINTENANCE"),
    ("@", "REBOOT_REQUESTED"),
    ("^", "REBOOT_ISSUED"),
    ("-", "PLANNED"),
)
_SUFFIX_FLAG = dict(STATE_SUFFIXES)

# sinfo names (short %t and long %T) that are a base state plus flags. DRAIN as the *first*
# word is sinfo's "drained"; after a '+' (scontrol's IDLE+DRAIN) it is the flag itself.
# Slurm's "draining" means jobs still run on the node; which of ALLOCATED or MIXED is lost.
_STATE_ALIASES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "ALLOC": ("ALLOCATED", ()),
    "MIX": ("MIXED", ()),
    "FUTR": ("FUTURE", ()),
    "UNK": ("UNKNOWN", ()),
    "DRAIN": ("IDLE", ("DRAIN",)),
    "DRAINED": ("IDLE", ("DRAIN",)),
    "DRNG": ("MIXED", ("DRAIN",)),
    "DRAINING": ("MIXED", ("DRAIN",)),
    "COMP": ("IDLE", ("COMPLETING",)),
    "COMPLETING": ("IDLE", ("COMPLETING",)),
    "FAIL": ("IDLE", ("FAIL",)),
    "FAILG": ("MIXED", ("FAIL",)),
    "FAILING": ("MIXED", ("FAIL",)),
    "MAINT": ("IDLE", ("MAINTENANCE",)),
    "RESV": ("IDLE", ("RESERVED",)),
    "RESERVED": ("IDLE", ("RESERVED",)),
    "PLND": ("IDLE", ("PLANNED",)),
    "PLANNED": ("IDLE", ("PLANNED",)),
    "INVAL": ("IDLE", ("INVALID_REG",)),
}

# Job states in which a job is still queued or holds (or is giving back) its nodes.
ACTIVE_JOB_STATES = frozenset((
    "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "SPECIAL_EXIT", "STOPPED", "RESV_DEL_HOLD",
))

_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)")
_NULLS = ("", "(null)", "none", "None", "N/A", "n/a")
# A job id: 12, or an array task 12_3. Anything else (an option, a list, a template) is refused.
_JOB_ID = re.compile(r"[0-9]{1,10}(_[0-9]{1,10})?")


def null(value: Any) -> Optional[str]:
    """Slurm's many spellings of nothing ('', '(null)', 'none', 'N/A') as None."""
    if value is None:
        return None
    text = str(value)
    return None if text in _NULLS else text


def split_list(value: Any) -> Tuple[str, ...]:
    """A comma list ('a,b', '(null)') or a JSON list as a tuple of strings."""
    if isinstance(value, (list, tuple)):
        return tuple(str(item) for item in value if null(item) is not None)
    text = null(value)
    return tuple(item for item in text.split(",") if item) if text else ()


def gpu_count(gres: Optional[str]) -> Optional[int]:
    """GPUs in a GRES string: 'gpu:8' is 8, 'gpu:h100:4(S:0-1),gpu:a100:2' is 6, no gpu entry is None."""
    counts = [int(match.group(1)) for match in _GPU_GRES.finditer(gres or "")]
    return sum(counts) if counts else None


def job_gpu_count(tres: Optional[str]) -> Optional[int]:
    """GPUs in a job's TRES text: 'gres/gpu:8' (24.11 on), 'gres:gpu:h100:2' (22.05), 'gpu:4'."""
    return gpu_count(re.sub(r"(^|,)gres[/:]", r"\1", tres or ""))


def job_gpus(per_job: Optional[str], per_node: Optional[str], node_count: Optional[int],
             allocated: Sequence[str] = ()) -> Optional[int]:
    """A job's GPUs: what each allocated node holds (``gres_detail``), else its request per job, else
    per node times its nodes."""
    held = [job_gpu_count(text) for text in allocated]
    if any(count is not None for count in held):
        return sum(count or 0 for count in held)
    total = job_gpu_count(per_job)
    if total is not None:
        return total
    each = job_gpu_count(per_node)
    return None if each is None else each * (node_count or 1)


def split_state(text: str) -> Tuple[str, Tuple[str, ...]]:
    """'IDLE+DRAIN', 'DOWN*', 'drained', 'idle~', 'futr' -> (base state, flags)."""
    words = [word for word in (text or "").strip().upper().split("+") if word]
    if not words:
        return "UNKNOWN", ()
    flags: List[str] = []
    suffix_flags: List[str] = []
    for index, word in enumerate(words):
        while word and word[-1] in _SUFFIX_FLAG:
            suffix_flags.insert(0, _SUFFIX_FLAG[word[-1]])
            word = word[:-1]
        if index == 0:
            base, implied = _STATE_ALIASES.get(word, (word, ()))
            flags.extend(implied)
        elif word and word not in flags:
            flags.append(word)
    flags.extend(flag for flag in suffix_flags if flag not in flags)
    return base or "UNKNOWN", tuple(flags)


def long_state(state: str, flags: Sequence[str]) -> str:
    """The state as sinfo's %T prints it: 'idle', 'drained', 'draining', 'down*', 'future'."""
    busy = state in ("ALLOCATED", "MIXED") or "COMPLETING" in flags
    if "DRAIN" in flags:
        text = "draining" if busy else "drained"
    elif "FAIL" in flags:
        text = "failing" if busy else "fail"
    elif "COMPLETING" in flags:
        text = "completing"
    else:
        text = state.lower()
    for suffix, flag in STATE_SUFFIXES:
        if flag in flags:
            # Slurm appends one suffix, the first that applies.
            return text + suffix
    return text


def expand_hostlist(expression: Optional[str]) -> List[str]:
    """'gpu-a-[001-003,005],gpu-b-001' -> each name; zero padding is kept."""
    text = null(expression)
    if not text:
        return []
    names: List[str] = []
    for part in _split_outside_brackets(text):
        names.extend(_expand_one(part))
    return names


def _split_outside_brackets(text: str) -> List[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _expand_one(name: str) -> List[str]:
    open_at = name.find("[")
    if open_at < 0:
        return [name]
    close_at = name.index("]", open_at)
    prefix, ranges, rest = name[:open_at], name[open_at + 1:close_at], name[close_at + 1:]
    expanded = []
    for item in ranges.split(","):
        low, _dash, high = item.partition("-")
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            for tail in _expand_one(rest):
                expanded.append("%s%0*d%s" % (prefix, width, number, tail))
    return expanded


@dataclass(frozen=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int

    def at_least(self, major: int, minor: int = 0) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def __str__(self) -> str:
        return "%d.%02d.%d" % (self.major, self.minor, self.micro)


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str  # base state, upper case: PENDING, RUNNING, COMPLETED, ...
    flags: Tuple[str, ...] = ()  # e.g. COMPLETING, REQUEUED (24.11 JSON lists them beside the state)
    name: Optional[str] = None
    reason: Optional[str] = None
    nodelist: str = ""  # Slurm's host list expression, as printed
    nodes: Tuple[str, ...] = ()  # the same, expanded
    partition: Optional[str] = None
    user: Optional[str] = None
    requeue: Optional[bool] = None  # None where the source does not say (squeue text)
    restarts: Optional[int] = None
    batch_host: Optional[str] = None
    # The batch script's exit code when it exited (None: still running, died of a signal, or the
    # source does not say): a RequeueExit code means slurmctld requeues the job itself.
    exit_code: Optional[int] = None
    gpus: Optional[int] = None  # the job's GPUs, all its nodes together (None: the source does not say)
    start_time: Optional[float] = None  # when it (last) started, epoch seconds; None: not started, or not said

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_JOB_STATES or "COMPLETING" in self.flags

    @property
    def completing(self) -> bool:
        """The job has ended and is giving its nodes back: 22.05 says so in the state, 23.02 on in a flag."""
        return self.state == "COMPLETING" or "COMPLETING" in self.flags

    def in_states(self, states: Iterable[str]) -> bool:
        wanted = {state.upper() for state in states}
        return self.state in wanted or bool(wanted.intersection(self.flags))

    def as_dict(self) -> Dict[str, Any]:
        return dict(job_id=self.job_id, name=self.name, state=self.state, flags=list(self.flags),
                    reason=self.reason, nodelist=self.nodelist, nodes=list(self.nodes), partition=self.partition,
                    user=self.user, requeue=self.requeue, restarts=self.restarts, batch_host=self.batch_host,
                    exit_code=self.exit_code, gpus=self.gpus, start_time=self.start_time)


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, upper case (BASE_STATES)
    flags: Tuple[str, ...] = ()
    reason: Optional[str] = None  # the user's text, whole
    reason_user: Optional[str] = None
    reason_time: Optional[str] = None  # ISO 8601, local time of the host that ran the command
    gres: str = ""
    features: Tuple[str, ...] = ()  # available (configured) features
    active_features: Tuple[str, ...] = ()
    weight: Optional[int] = None
    cpus: Optional[int] = None
    memory_mb: Optional[int] = None
    partitions: Tuple[str, ...] = ()
    jobs: Tuple[SlurmJob, ...] = field(default=())  # filled in by the client from squeue

    @property
    def gpus(self) -> Optional[int]:
        return gpu_count(self.gres)

    @property
    def long_state(self) -> str:
        return long_state(self.state, self.flags)

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    def with_jobs(self, jobs: Iterable[SlurmJob]) -> "SlurmNode":
        return replace(self, jobs=tuple(jobs))

    def as_dict(self) -> Dict[str, Any]:
        return dict(
            name=self.name, state=self.state, flags=list(self.flags), long_state=self.long_state,
            reason=self.reason, reason_user=self.reason_user, reason_time=self.reason_time,
            gres=self.gres, gpus=self.gpus, features=list(self.features),
            active_features=list(self.active_features), weight=self.weight, cpus=self.cpus,
            memory_mb=self.memory_mb, partitions=list(self.partitions),
            jobs=[job.as_dict() for job in self.jobs],
        )


def check_job_ids(job_ids: Sequence[Any], field: str = "job_ids", allow_empty: bool = False) -> List[str]:
    """Job ids as strings (``12``, ``12_3``); anything else, or none unless allowed, is FieldError(field)."""
    if isinstance(job_ids, (str, int)):
        job_ids = [job_ids]
    ids = [str(job_id) for job_id in job_ids or []]
    if not ids and not allow_empty:
        raise FieldError(field, "must name at least one job")
    bad = [job_id for job_id in ids if not _JOB_ID.fullmatch(job_id)]
    if bad:
        raise FieldError(field, "must be job ids such as 12 or 12_3, not %s" % ", ".join(map(repr, bad)))
    return ids
