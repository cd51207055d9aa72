# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""What the remediation acts on: the fault a node's ``GpuHealthy`` condition reports. Pure.

The health agent writes the condition (``agent/condition.py``) and this module reads it, both
through the one codec, ``health/gpu_condition.py``: verdict, action, XIDs and the worst fault's
device come from the message's data line, never from its prose.

The condition, not the alert, is the source of truth: an alert only says *that* a node is unhealthy,
and both triggers (Alertmanager and the node-condition source) end up reading the same condition.
One alert is about a job, not the node: ``GpuJobStalled`` (a job whose progress stopped on a node
that may be healthy) gives a ``JOB_HANG`` fault from the alert's own ``job_id`` label, checked here
as a Slurm job id (``fault_from_trigger``); a node that is unhealthy as well is remediated for its
condition, whose plan takes all its jobs off it.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import gpu_condition
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import ACTION_ORDER
from ansible_collections.gpufleet.resilience.plugins.module_utils.rfc3339 import epoch_seconds
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import check_job_ids

REASON_PREFIX = "gpufleet:"
# scontrol keeps a reason on one line; long ones are hard to read in sinfo -R.
SLURM_REASON_MAX = 200


@dataclass(frozen=True)
class Fault:
    """A node's fault as the remediation sees it."""

    verdict: str  # fatal | degraded
    action: str  # a catalog action (health.model.ACTION_ORDER)
    reason: str  # the condition's reason: Xid79, EccDoubleBit, ...
    message: str
    xids: Tuple[int, ...] = ()
    gpu_index: Optional[int] = None
    gpu_uuid: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)
    since: Optional[float] = None  # when the condition turned False (epoch seconds): when the fault began
    job_ids: Tuple[str, ...] = ()  # the jobs the fault is about (JOB_HANG); none: the node's

    def as_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["xids"] = list(self.xids)
        data["job_ids"] = list(self.job_ids)
        return data


def fault_from_condition(condition: Optional[Mapping[str, Any]]) -> Optional[Fault]:
    """The fault a ``GpuHealthy`` condition reports; None when it reports none (True, Unknown, absent)."""
    if not condition or condition.get("status") != "False":
        return None
    message = str(condition.get("message") or "")
    decoded = gpu_condition.decode(condition)
    if decoded is None:
        # A condition we did not write the way we write it: act on it only as far as we understand it.
        return Fault(
            verdict="degraded",
            action="CONTACT_SUPPORT",
            reason=str(condition.get("reason") or "Unknown"),
            message=message,
            since=transition_time(condition),
        )
    return Fault(
        verdict=decoded.verdict,
        action=decoded.action,
        reason=decoded.reason,
        message=message.split("\n", 1)[0],  # the people's line; the data is in the fields
        xids=decoded.xids,
        gpu_index=decoded.gpu_index,
        gpu_uuid=decoded.gpu_uuid,
        since=transition_time(condition),
    )


def transition_time(condition: Mapping[str, Any]) -> Optional[float]:
    """A condition's ``lastTransitionTime`` in epoch seconds; None when absent or unreadable. The API
    serves ``2026-12-06T02:30:00Z``; the Python client's serialization gives ``...+00:00`` or a datetime."""
    return epoch_seconds(condition.get("lastTransitionTime"))


# An alert's startsAt further back than this, or ahead of the clock by more than the skew allowed,
# is not believed as the start of a stall (it is input: anyone who reaches Alertmanager writes it).
STALL_START_MAX_AGE_S = 7 * 86400.0
CLOCK_SKEW_S = 300.0


def stall_start(trigger: Mapping[str, Any], now: float) -> Optional[float]:
    """When a stalled job's alert began firing (its ``startsAt``), the fault's start for its cost; None
    when absent, unreadable or not believable (then the remediation's start is used)."""
    began = epoch_seconds(trigger.get("starts_at"))
    if began is None or not now - STALL_START_MAX_AGE_S <= began <= now + CLOCK_SKEW_S:
        return None
    return min(began, now)


def fault_from_input(value: Mapping[str, Any], field_name: str = "fault") -> Fault:
    """A fault given by hand (a rehearsal, a site without agents): {action, reason, ...}."""
    if not isinstance(value, Mapping):
        raise FieldError(field_name, "must be a dict with at least 'action', not %r" % (value,))
    action = str(value.get("action") or "").upper()
    if action not in ACTION_ORDER or action == "NONE":
        raise FieldError(field_name + ".action", "must be one of %s, not %r" % (", ".join(ACTION_ORDER[1:]), action))
    verdict = str(value.get("verdict") or "fatal")
    if verdict not in ("fatal", "degraded"):
        raise FieldError(field_name + ".verdict", "must be fatal or degraded, not %r" % verdict)
    xids = value.get("xids") or ([value["xid"]] if value.get("xid") is not None else [])
    try:
        xids = tuple(int(code) for code in xids)
        gpu_index = None if value.get("gpu_index") is None else int(value["gpu_index"])
    except (TypeError, ValueError):
        raise FieldError(field_name, "xid, xids and gpu_index must be integers") from None
    reason = str(value.get("reason") or ("Xid%d" % xids[0] if xids else action.title().replace("_", "")))
    return Fault(
        verdict=verdict,
        action=action,
        reason=reason,
        message=str(value.get("message") or reason),
        xids=xids,
        gpu_index=gpu_index,
        gpu_uuid=value.get("gpu_uuid"),
    )


# The alert about a stalled job (roles/monitoring/files/gpufleet-alerts.yml), its plan and reason.
JOB_STALLED_ALERT = "GpuJobStalled"
JOB_HANG = "JOB_HANG"
JOB_STALLED_REASON = "JobStalled"


def fault_from_trigger(trigger: Optional[Mapping[str, Any]], field_name: str = "remediation_trigger_encoded",
                       now: Optional[float] = None) -> Optional[Fault]:
    """The ``JOB_HANG`` fault of a ``GpuJobStalled`` alert; None for any other trigger.

    The job id comes from the alert's label, which anyone who reaches Alertmanager writes: it must be
    a Slurm job id, or the remediation stops here naming the label."""
    if not trigger or trigger.get("source") != "alertmanager" or trigger.get("alert") != JOB_STALLED_ALERT:
        return None
    labels = trigger.get("labels") or {}
    job_id = labels.get("job_id")
    if not isinstance(job_id, str):
        raise FieldError(field_name + ".labels.job_id", "must be a Slurm job id (1234 or 1234_5), not %r" % (job_id,))
    job_id = check_job_ids([job_id], field_name + ".labels.job_id")[0]
    summary = (trigger.get("annotations") or {}).get("summary") or ""
    return Fault(
        verdict="degraded",
        action=JOB_HANG,
        reason=JOB_STALLED_REASON,
        message=summary.split("\n", 1)[0] or "job %s stopped making progress" % job_id,
        job_ids=(job_id,),
        # The alert fires once the job's progress has stopped for the rule's window: a floor of the hang.
        since=stall_start(trigger, time.time() if now is None else now),
    )


def slurm_reason(fault: Fault, remediation_id: str) -> str:
    """``gpufleet: Xid79 GPU-8c1e... (remediation r-...)``: ours by its prefix, never Slinky's."""
    device = fault.gpu_uuid or ("GPU %d" % fault.gpu_index if fault.gpu_index is not None else "")
    text = " ".join(part for part in (REASON_PREFIX, fault.reason, device, "(remediation %s)" % remediation_id) if part)
    return re.sub(r"[\x00-\x1f\x7f]", " ", text)[:SLURM_REASON_MAX]
