# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Pure parsers of scontrol output: ``--version``, ``ping``, ``show node`` (multi-line, ``-o``
one-liner and the ``--json`` of 23.02+), ``show job -o``.

``show node`` text is ``Key=Value`` words, where a value may hold spaces (``OS=Linux 6.18 #1
SMP``): a value runs until the next word that looks like ``Key=``. The exception is the node's
``Reason``, which is the text an operator or our remediation wrote and may hold anything,
``Key=`` words and ``|`` included. Slurm prints it as ``Reason=<text> [<user>@<time>]`` at the
end of its own line (multi-line form) or of the record (one-liner), so the reason runs from
``Reason=`` to the last such stamp on that line, and is never split.

Pure: no I/O.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmParseError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import (
    ACTIVE_JOB_STATES,
    BASE_STATES,
    SlurmJob,
    SlurmNode,
    SlurmVersion,
    expand_hostlist,
    job_gpus,
    null,
    split_list,
    split_state,
)

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
_KEY = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_/:.+\-]*)=")
_REASON = re.compile(r"(?<!\S)Reason=")
_STAMP = re.compile(r" \[([^\[\]@\s]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None)\]")
_PING = re.compile(r"Slurmctld\((\w+)\) at (\S+) is (\w+)")

JsonDoc = Union[str, bytes, Mapping[str, Any]]


def parse_version(text: str) -> SlurmVersion:
    """'slurm-wlm 22.05.8' or 'slurm 24.11.5' -> SlurmVersion."""
    match = _VERSION.search(text or "")
    if not match:
        raise SlurmParseError("scontrol --version", "no version number", text)
    return SlurmVersion(*(int(part) for part in match.groups()))


def parse_ping(text: str) -> List[Dict[str, str]]:
    """'Slurmctld(primary) at host is UP' lines -> [{role, host, state}]."""
    return [dict(role=role, host=host, state=state.upper()) for role, host, state in _PING.findall(text or "")]


def parse_requeue_exit(text: str) -> List[int]:
    """``scontrol show config``'s ``RequeueExit = 75,80-82`` -> [75, 80, 81, 82]; [] for (null)."""
    match = re.search(r"^RequeueExit\s*=\s*(\S+)\s*$", text or "", re.M)
    if not match or match.group(1) == "(null)":
        return []
    codes: List[int] = []
    for part in match.group(1).split(","):
        low, _dash, high = part.partition("-")
        try:
            codes.extend(range(int(low), int(high or low) + 1))
        except ValueError:
            raise SlurmParseError("scontrol show config", "RequeueExit is not a list of codes",
                                  match.group(0)) from None
    return codes


def split_records(text: str) -> List[str]:
    """One string per record: a record starts at a line that does not begin with whitespace.

    That covers both layouts: a one-liner record is one line, a multi-line record continues on
    indented lines, and blank or whitespace-only lines inside it (24.11 prints one before
    ``Reason=``) belong to it.
    """
    records: List[List[str]] = []
    for line in (text or "").splitlines():
        if line and not line[0].isspace():
            records.append([line])
        elif records:
            records[-1].append(line)
    return ["\n".join(lines) for lines in records]


def parse_record(record: str, free_text_key: Optional[str] = None) -> Dict[str, str]:
    """``Key=Value`` words of one record.

    With ``free_text_key`` (the node ``Reason``), that value is cut out first, up to the last
    ``[user@time]`` stamp of its line, and the stamp goes into ``<key>User`` and ``<key>Time``.
    """
    fields: Dict[str, str] = {}
    if free_text_key == "Reason":
        record, reason = _cut_reason(record)
        fields.update(reason)
    matches = list(_KEY.finditer(record))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(record)
        fields.setdefault(match.group(1), record[match.end():end].strip())
    return fields


def _cut_reason(record: str) -> Tuple[str, Dict[str, str]]:
    match = _REASON.search(record)
    if not match:
        return record, {}
    line_end = record.find("\n", match.end())
    line_end = len(record) if line_end < 0 else line_end
    segment = record[match.end():line_end]
    stamps = list(_STAMP.finditer(segment))
    found: Dict[str, str] = {}
    if stamps:
        stamp = stamps[-1]
        found["Reason"] = segment[:stamp.start()]
        found["ReasonUser"], found["ReasonTime"] = stamp.group(1), stamp.group(2)
        rest = segment[stamp.end():]
    else:
        # No stamp (a reason without a time): the text runs to the end of its line.
        found["Reason"] = segment.rstrip()
        rest = ""
    return record[:match.start()] + " " + rest + record[line_end:], found


def int_field(value: Any) -> Optional[int]:
    text = null(value)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_nodes_text(text: str) -> Dict[str, SlurmNode]:
    """``scontrol show node`` in either layout (multi-line or ``--oneliner``) -> name: SlurmNode."""
    nodes: Dict[str, SlurmNode] = {}
    for record in split_records(text):
        fields = parse_record(record, free_text_key="Reason")
        name = fields.get("NodeName")
        if not name:
            raise SlurmParseError("scontrol show node", "a record without NodeName", record)
        state, flags = split_state(fields.get("State", ""))
        nodes[name] = SlurmNode(
            name=name, state=state, flags=flags,
            reason=null(fields.get("Reason")), reason_user=null(fields.get("ReasonUser")),
            reason_time=None if fields.get("ReasonTime") in (None, "Unknown", "None") else fields["ReasonTime"],
            gres=null(fields.get("Gres")) or "",
            features=split_list(fields.get("AvailableFeatures")),
            active_features=split_list(fields.get("ActiveFeatures")),
            weight=int_field(fields.get("Weight")), cpus=int_field(fields.get("CPUTot")),
            memory_mb=int_field(fields.get("RealMemory")), partitions=split_list(fields.get("Partitions")),
        )
    return nodes


def parse_jobs_text(text: str) -> List[SlurmJob]:
    """``scontrol show job --oneliner`` (or multi-line) -> SlurmJob per record."""
    jobs = []
    for record in split_records(text):
        fields = parse_record(record)
        if "JobId" not in fields:
            raise SlurmParseError("scontrol show job", "a record without JobId", record)
        state, flags = fields.get("JobState", "UNKNOWN").upper(), ()
        nodelist = null(fields.get("NodeList")) or ""
        user = null(fields.get("UserId"))
        jobs.append(SlurmJob(
            job_id=fields["JobId"], state=state, flags=flags, name=null(fields.get("JobName")),
            reason=null(fields.get("Reason")), nodelist=nodelist, nodes=tuple(expand_hostlist(nodelist)),
            partition=null(fields.get("Partition")), user=user.split("(", 1)[0] if user else None,
            requeue=fields["Requeue"] == "1" if "Requeue" in fields else None,
            restarts=int_field(fields.get("Restarts")), batch_host=null(fields.get("BatchHost")),
            exit_code=_exit_code(fields.get("ExitCode"), state),
            # NumNodes=7-7 (a pending job's min-max): the least it runs on.
            gpus=job_gpus(null(fields.get("TresPerJob")), null(fields.get("TresPerNode")),
                          int_field((fields.get("NumNodes") or "").split("-")[0])),
            # A pending job's StartTime is when Slurm expects to start it: not a start.
            start_time=None if state == "PENDING" else local_time(null(fields.get("StartTime"))),
        ))
    return jobs


def local_time(text: Optional[str]) -> Optional[float]:
    """squeue's ``%S`` (``2026-12-06T02:30:00``, the host's local time) as epoch seconds; None for
    N/A, Unknown or a time not yet known."""
    try:
        return time.mktime(time.strptime(text or "", "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def _exit_code(value: Optional[str], state: str) -> Optional[int]:
    """``ExitCode=75:0`` (code:signal) of a job that has exited; None while it runs or after a signal."""
    code, _colon, signal = (value or "").partition(":")
    if state in ACTIVE_JOB_STATES or signal not in ("", "0"):
        return None
    return int_field(code)


def load_json(doc: JsonDoc, what: str) -> Mapping[str, Any]:
    """A ``--json`` document, checked for Slurm's own ``errors`` list."""
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except ValueError as exc:
            text = doc.decode(errors="replace") if isinstance(doc, bytes) else doc
            raise SlurmParseError(what, "not JSON (%s)" % exc, text) from None
    if not isinstance(doc, Mapping):
        raise SlurmParseError(what, "not a JSON object", str(doc))
    errors = [error for error in doc.get("errors") or [] if error]
    if errors:
        raise SlurmParseError(what, "Slurm reported errors", json.dumps(errors))
    return doc


def json_number(value: Any) -> Optional[int]:
    """An integer from v0.0.38 (plain) or v0.0.40+ ({set, infinite, number}) JSON."""
    if isinstance(value, Mapping):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def json_state(state: Any, state_flags: Any = None) -> Tuple[str, Tuple[str, ...]]:
    """v0.0.38: 'idle' with state_flags ['DRAIN']; v0.0.40+: ['IDLE', 'DRAIN']."""
    if isinstance(state, (list, tuple)):
        words = [str(word).upper() for word in state]
        base = next((word for word in words if word in BASE_STATES), words[0] if words else "UNKNOWN")
        return base, tuple(word for word in words if word != base)
    base, flags = split_state(str(state or ""))
    return base, flags + tuple(str(flag).upper() for flag in state_flags or () if str(flag).upper() not in flags)


def epoch_to_iso(value: Any) -> Optional[str]:
    """Seconds since the epoch as scontrol prints times: local, 'YYYY-MM-DDTHH:MM:SS'; 0 is None."""
    seconds = json_number(value)
    if not seconds:
        return None
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%S")


def node_from_json(obj: Mapping[str, Any]) -> SlurmNode:
    """One node of ``scontrol show node --json`` (v0.0.39+) or ``sinfo --json`` of 22.05 (v0.0.38)."""
    if not obj.get("name"):
        raise SlurmParseError("node JSON", "a node without a name", json.dumps(obj)[:200])
    state, flags = json_state(obj.get("state"), obj.get("state_flags"))
    reason = null(obj.get("reason"))
    # 22.05 keeps reason_set_by_user after the reason is cleared; without a reason it means nothing.
    return SlurmNode(
        name=str(obj["name"]), state=state, flags=flags, reason=reason,
        reason_user=null(obj.get("reason_set_by_user")) if reason else None,
        reason_time=epoch_to_iso(obj.get("reason_changed_at")) if reason else None,
        gres=null(obj.get("gres")) or "",
        features=split_list(obj.get("features")), active_features=split_list(obj.get("active_features")),
        weight=json_number(obj.get("weight")), cpus=json_number(obj.get("cpus")),
        memory_mb=json_number(obj.get("real_memory")), partitions=split_list(obj.get("partitions")),
    )


def parse_nodes_json(doc: JsonDoc) -> Dict[str, SlurmNode]:
    """``scontrol show node --json`` (23.02+) -> name: SlurmNode."""
    nodes = {}
    for obj in load_json(doc, "scontrol show node --json").get("nodes") or []:
        node = node_from_json(obj)
        nodes[node.name] = node
    return nodes
