# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Pure parsers of squeue output: ``--json`` (22.05's v0.0.38 layout and 24.11's v0.0.40+
layout, which ``scontrol show job --json`` shares), the fixed ``--format`` the client asks for
when there is no ``--json``, and the default table a person pastes.

The job name is the submitter's text and may hold spaces and ``|``: in the fixed format it is the
last field, so a split with a limit keeps it whole.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmParseError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import (
    ACTIVE_JOB_STATES,
    SlurmJob,
    expand_hostlist,
    job_gpus,
    null,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import (
    JsonDoc,
    int_field,
    json_number,
    load_json,
    local_time,
)

# What the client asks squeue for without --json: (field, format code), name last.
SQUEUE_FIELDS = (
    ("job_id", "%i"),
    ("state", "%T"),
    ("reason", "%r"),
    ("partition", "%P"),
    ("user", "%u"),
    ("nodelist", "%N"),
    ("tres_per_node", "%b"),
    ("node_count", "%D"),
    ("start_time", "%S"),
    ("name", "%j"),
)
SQUEUE_FORMAT = "|".join(code for _field, code in SQUEUE_FIELDS)

# squeue's compact state codes (the default table's ST column).
SHORT_JOB_STATES = {
    "BF": "BOOT_FAIL", "CA": "CANCELLED", "CD": "COMPLETED", "CF": "CONFIGURING", "CG": "COMPLETING",
    "DL": "DEADLINE", "F": "FAILED", "NF": "NODE_FAIL", "OOM": "OUT_OF_MEMORY", "PD": "PENDING",
    "PR": "PREEMPTED", "R": "RUNNING", "RD": "RESV_DEL_HOLD", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED", "RS": "RESIZING", "RV": "REVOKED", "SI": "SIGNALING", "SE": "SPECIAL_EXIT",
    "SO": "STAGE_OUT", "ST": "STOPPED", "S": "SUSPENDED", "TO": "TIMEOUT",
}


def job_from_fields(fields: Mapping[str, Any]) -> SlurmJob:
    """A SlurmJob from text fields named as in SQUEUE_FIELDS; unknown fields are ignored."""
    state = (null(fields.get("state")) or "UNKNOWN").upper()
    nodelist = null(fields.get("nodelist")) or ""
    state = SHORT_JOB_STATES.get(state, state)
    return SlurmJob(
        job_id=str(fields["job_id"]), state=state,
        name=null(fields.get("name")), reason=null(fields.get("reason")),
        nodelist=nodelist, nodes=tuple(expand_hostlist(nodelist)),
        partition=null(fields.get("partition")), user=null(fields.get("user")),
        gpus=job_gpus(None, null(fields.get("tres_per_node")), int_field(fields.get("node_count"))),
        # A pending job's %S is when Slurm expects to start it: not a start.
        start_time=None if state == "PENDING" else local_time(null(fields.get("start_time"))),
    )


def parse_squeue_text(text: str, fields: Sequence[str] = tuple(name for name, _code in SQUEUE_FIELDS),
                      sep: str = "|", free_field: str = "name") -> List[SlurmJob]:
    """Lines of ``squeue --format`` with the ``fields`` in order, joined by ``sep``.

    ``free_field`` may hold ``sep`` itself: it takes the words left over. A header line (first
    word JOBID) is skipped. A line with too few fields is an error, not skipped: a job the parser
    drops would be a job the remediation does not see.
    """
    fields = list(fields)
    free = fields.index(free_field)
    jobs = []
    for line in (text or "").splitlines():
        if not line.strip() or line.split(sep, 1)[0].strip().upper() == "JOBID":
            continue
        words = line.split(sep)
        extra = len(words) - len(fields)
        if extra < 0:
            raise SlurmParseError("squeue", "expected %d fields" % len(fields), line)
        values = [*words[:free], sep.join(words[free:free + extra + 1]), *words[free + extra + 1:]]
        jobs.append(job_from_fields({name: values[index].strip() for index, name in enumerate(fields)}))
    return jobs


def parse_squeue_default(text: str) -> List[SlurmJob]:
    """squeue's default table (JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)).

    For people's pastes and the captures: it truncates names to 8 characters and breaks on names
    with spaces, which is why the client never reads it.
    """
    jobs = []
    for line in (text or "").splitlines():
        words = line.split(None, 7)
        if not words or words[0] == "JOBID":
            continue
        if len(words) < 8:
            raise SlurmParseError("squeue", "expected 8 columns", line)
        job_id, partition, name, user, state, _time, _count, last = words
        pending = last.startswith("(") and last.endswith(")")
        jobs.append(job_from_fields(dict(
            job_id=job_id, partition=partition, name=name, user=user, state=state,
            reason=last[1:-1] if pending else None, nodelist="" if pending else last)))
    return jobs


def _job_state(value: Any) -> Tuple[str, Tuple[str, ...]]:
    """v0.0.38: 'RUNNING'; v0.0.40+: ['RUNNING'] or ['PENDING', 'REQUEUED'], the base state first."""
    if isinstance(value, (list, tuple)):
        words = [str(word).upper() for word in value] or ["UNKNOWN"]
        return words[0], tuple(words[1:])
    return str(value or "UNKNOWN").upper(), ()


def json_exit_code(value: Any) -> Optional[int]:
    """The exit code of a job that exited, else None.

    v0.0.38 gives the raw wait status (75 << 8 for ``exit 75``; the low 7 bits are a signal);
    v0.0.40+ ``{"status": ["EXITED"|"SIGNALED"|...], "return_code": {set, number}, ...}``.
    """
    if isinstance(value, Mapping):
        if "SIGNALED" in (value.get("status") or ()):
            return None
        return json_number(value.get("return_code"))
    status = json_number(value)
    if status is None or status & 0x7F:
        return None
    return (status >> 8) & 0xFF


def job_from_json(obj: Mapping[str, Any]) -> SlurmJob:
    """One job of ``squeue --json`` (v0.0.38 or v0.0.40+) or ``scontrol show job --json``."""
    if obj.get("job_id") is None:
        raise SlurmParseError("job JSON", "a job without job_id", str(obj)[:200])
    state, flags = _job_state(obj.get("job_state"))
    nodelist = null(obj.get("nodes")) or ""
    requeue = obj.get("requeue")
    job_id = str(json_number(obj["job_id"]) if isinstance(obj["job_id"], Mapping) else obj["job_id"])
    # An array task's own job id names the whole array when it equals array_job_id (the task that
    # got the array's id): `scancel 12` would signal every task, on every node. Text output (%i)
    # and scancel/scontrol use 12_3; so does this. A pending array not yet split has no task id.
    array_job, array_task = json_number(obj.get("array_job_id")), json_number(obj.get("array_task_id"))
    if array_job and array_task is not None:
        job_id = "%d_%d" % (array_job, array_task)
    return SlurmJob(
        job_id=job_id,
        state=state, flags=flags, name=null(obj.get("name")), reason=null(obj.get("state_reason")),
        nodelist=nodelist, nodes=tuple(expand_hostlist(nodelist)), partition=null(obj.get("partition")),
        user=null(obj.get("user_name")), requeue=bool(requeue) if requeue is not None else None,
        restarts=json_number(obj.get("restart_cnt")), batch_host=null(obj.get("batch_host")),
        exit_code=None if state in ACTIVE_JOB_STATES else json_exit_code(obj.get("exit_code")),
        gpus=job_gpus(null(obj.get("tres_per_job")), null(obj.get("tres_per_node")), json_number(obj.get("node_count")),
                      [str(item) for item in obj.get("gres_detail") or ()]),
        # A pending job's start_time is when Slurm expects to start it: not a start.
        start_time=None if state == "PENDING" else (json_number(obj.get("start_time")) or None),
    )


def parse_jobs_json(doc: JsonDoc, what: str = "squeue --json") -> List[SlurmJob]:
    return [job_from_json(obj) for obj in load_json(doc, what).get("jobs") or []]


def jobs_by_node(jobs: Sequence[SlurmJob]) -> Dict[str, List[SlurmJob]]:
    """Node name -> the active jobs allocated on it (pending jobs hold no node)."""
    by_node: Dict[str, List[SlurmJob]] = {}
    for job in jobs:
        if job.active:
            for node in job.nodes:
                by_node.setdefault(node, []).append(job)
    return by_node


def filter_jobs(jobs: Sequence[SlurmJob], nodes: Optional[Sequence[str]] = None,
                states: Optional[Sequence[str]] = None) -> List[SlurmJob]:
    """Jobs on any of ``nodes`` in any of ``states`` (default: the active ones)."""
    wanted_nodes = set(nodes) if nodes is not None else None
    kept = []
    for job in jobs:
        if not (job.in_states(states) if states else job.active):
            continue
        if wanted_nodes is not None and not wanted_nodes.intersection(job.nodes):
            continue
        kept.append(job)
    return kept
