# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The audit record and the notifications of a remediation. ``audit_record`` and the texts are pure;
``append_record`` writes the JSON-lines audit log.

One line per remediation, written once: a rerun after a crash finds its id in the log and does not
write it again. The line holds the whole timeline (each phase's start, end and outcome), the fault,
the plan and why it was chosen, the jobs affected, and what triggered it.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import append_line
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.cost import cost_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import RemediationPlan

SCHEMA = 1


def audit_record(progress: Mapping[str, Any]) -> Dict[str, Any]:
    plan = RemediationPlan.from_dict(progress["plan"])
    phases = progress.get("phases") or {}
    timeline: List[Dict[str, Any]] = []
    for phase in plan.phases:
        if phase in phases:
            entry = phases[phase]
            timeline.append(
                {
                    "phase": phase,
                    "start": entry.get("start"),
                    "end": entry.get("end"),
                    "duration_s": round(float(entry.get("end") or 0) - float(entry.get("start") or 0), 3),
                    "outcome": entry.get("outcome") or {},
                }
            )
    jobs = ((phases.get("jobs") or {}).get("outcome") or {}).get("jobs") or []
    # Where the evidence bundle is (None: the plan had no evidence phase, or it was turned off).
    evidence = ((phases.get("evidence") or {}).get("outcome") or {}).get("path")
    started = float(progress.get("started_at") or 0)
    finished = progress.get("finished_at")
    return {
        "schema": SCHEMA,
        "id": progress.get("id"),
        "node": progress.get("node"),
        "result": progress.get("result"),
        "error": progress.get("error"),
        "started_at": started,
        "finished_at": finished,
        "duration_s": round(float(finished) - started, 3) if finished else None,
        "trigger": progress.get("trigger") or {},
        "fault": progress.get("fault") or {},
        "plan": plan.as_dict(),
        "decisions": progress.get("decisions") or {},
        "stopped": progress.get("stopped"),
        "resumed_at": progress.get("resumed") or [],
        "dry_run": bool(progress.get("dry_run")),
        "timeline": timeline,
        "jobs": jobs,
        "evidence": evidence,
    }


class AuditLogError(GpufleetError):
    """The audit log cannot be written; ``path`` names it. Nothing partial is left in it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__("audit log %s: %s" % (path, message))
        self.field = "audit_log"
        self.path = path


def already_recorded(path: str, record: Mapping[str, Any], warnings: Optional[List[str]] = None) -> bool:
    """A line of the same remediation and end is there (a failed attempt and its resumed end are two lines)."""
    def key(item: Mapping[str, Any]) -> tuple:
        # One line per end: a remediation succeeds (or stops) once, but may fail several times first.
        ended = item.get("finished_at") if item.get("result") == "failed" else None
        return (item.get("id"), item.get("result"), ended)

    return any(key(line) == key(record) for line in read_records(path, warnings=warnings))


def append_record(path: str, record: Mapping[str, Any], warnings: Optional[List[str]] = None) -> bool:
    """Append ``record`` as one whole line unless it is there already; True when written.

    A failed write leaves the log as it was and raises AuditLogError naming the file (a full
    disk says so): the remediation stops there rather than record half a line."""
    if already_recorded(path, record, warnings):
        return False
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, mode=0o750, exist_ok=True)
        append_line(path, line, 0o640)
    except OSError as exc:
        why = "the disk is full (ENOSPC)" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise AuditLogError(path, "cannot append the record of %s: %s; nothing was written"
                            % (record.get("id"), why)) from exc
    return True


def start_text(node: str, remediation_id: str, fault: Mapping[str, Any], plan: Mapping[str, Any]) -> str:
    acts = plan.get("name") not in ("HOLD", "BREAKER_OPEN", "CONTACT_SUPPORT", "DECODE")
    tail = "No action required." if acts else "A human must look at it."
    why = " (%s)" % plan["why"] if plan.get("why") else ""
    return "GPU node %s: %s (%s, %s). gpufleet will %s%s. Remediation %s. %s" % (
        node,
        fault.get("reason"),
        fault.get("verdict"),
        fault.get("action"),
        plan.get("intent") or "act",
        why,
        remediation_id,
        tail,
    )


def end_text(record: Mapping[str, Any]) -> str:
    node, result = record.get("node"), record.get("result")
    jobs = record.get("jobs") or []
    fates = ", ".join("%s %s" % (job.get("job_id"), job.get("fate")) for job in jobs) or "no jobs"
    stopped = record.get("stopped") or {}
    if stopped:
        detail = "stopped at %s: %s; the node stays fenced. A human must look at it." % (
            stopped.get("at_phase"),
            stopped.get("why"),
        )
    elif result == "succeeded":
        detail = "done in %ss. No action required." % record.get("duration_s")
    else:
        detail = "%s%s. A human must look at it." % (result, ": %s" % record["error"] if record.get("error") else "")
    # Where to see it as a picture: the fleet view draws it from the audit log.
    picture = "ansible-playbook playbooks/fleet-status.yml -e fleet_status_node=%s -e fleet_status_remediation_id=%s" \
        % (node, record.get("id"))
    evidence = " Evidence: %s" % record["evidence"] if record.get("evidence") else ""
    spent = " Cost: %s." % cost_text(record["cost"]) if record.get("cost") else ""
    return "GPU node %s, remediation %s (%s): %s Jobs: %s.%s Timeline: %s%s" % (
        node,
        record.get("id"),
        (record.get("plan") or {}).get("name"),
        detail,
        fates,
        spent,
        picture,
        evidence,
    )


def read_records(path: str, node: Optional[str] = None, warnings: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    """The records of the log (of ``node``). A torn line (a crash or a full disk mid-write, an
    editor) is skipped with a warning naming the file and line: one bad line must not block every
    later remediation."""
    records = []
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw.decode("utf-8"))
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
                    if warnings is not None:
                        warnings.append("audit log %s line %d is not a JSON record, skipped: %s" % (path, number, exc))
                    continue
                if not isinstance(record, dict):
                    if warnings is not None:
                        warnings.append("audit log %s line %d is not a JSON object, skipped" % (path, number))
                    continue
                if node is None or record.get("node") == node:
                    records.append(record)
    except FileNotFoundError:
        pass
    return records
