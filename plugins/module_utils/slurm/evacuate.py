# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Get the jobs off a node: signal, wait the grace, requeue or cancel what is left, report each fate.

The remediation's step 4. Every job running on the node gets the signal (``scancel
--signal=TERM --full``: without ``--full`` the batch script itself is not signalled), one
``scancel`` per job, so a job that ends meanwhile fails only its own call and every job is
signalled at most once. Ids in ``skip_signal`` were signalled by an earlier run of the same
remediation and are not signalled again; nor is a job already COMPLETING (it has ended).

Then it looks every ``poll`` seconds until none of the jobs is still on the node, or ``grace``
passes. A job that checkpoints and exits with a ``RequeueExit`` code (train_sim's 75) is requeued
by slurmctld itself and goes PENDING: it *left*. After the grace, each job still there is
requeued (``scontrol requeue``) when it is requeueable and cancelled otherwise, or cancelled
with ``then=cancel``. A job whose requeue flag the source does not give is treated as
requeueable (Slurm's default ``JobRequeue=1``); if slurmctld refuses to requeue it (not a batch
job), it is cancelled. A job already COMPLETING after the grace is ending and is left alone.

A job that *left* is not always safe. Most jobs run inside a shell (``--wrap``, a ``#!/bin/bash``
script with or without ``srun``); ``--full`` signals that shell too, and a shell that does not
trap the signal dies of it: the job ends FAILED (``WTERMSIG 15``) and slurmctld does not requeue
it, whatever its program did with the signal. So every job this remediation signalled that ended
FAILED is requeued (``scontrol requeue`` takes a finished batch job back while slurmctld still
lists it, MinJobAge) when it is requeueable, and reported when it is not. A job that ended
COMPLETED in the grace finished its work and is left alone; one CANCELLED was cancelled by
someone and is left alone too. A rerun after a crash does the same for the jobs it was told it
had signalled, and a job already requeued is PENDING or RUNNING, so it is never requeued twice.

Last, it looks at each job once more and reports the state it is in now: PENDING (requeued),
RUNNING (on another node already), COMPLETED, FAILED, CANCELLED, or null when Slurm no longer
lists it.

A long grace can be waited in slices (``return_after``): the call returns ``done=false`` with the
jobs still on the node and the seconds of grace left, requeues and cancels nothing, and the
caller says where the wait is and calls again with ``grace_started`` (the wall-clock time the
first call returned), so the grace is counted once however many calls it takes. The signals are
not sent twice: the caller passes the ids signalled so far in ``skip_signal``, or the remediation's
record holds them.

In check mode nothing runs and nothing is waited for; each job's fate is the one it would get if
it did not leave within the grace. The clock and sleep are injected, so the waiting is tested
without time passing.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import (
    check_job_ids,
    check_node,
    check_signal,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmError,
    SlurmTimeoutError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import ACTIVE_JOB_STATES, SlurmJob

THEN = ("requeue", "cancel")
LEFT = "left"
REQUEUED = "requeued"
CANCELLED = "cancelled"
# With only_requeueable: a job that may not be requeued, neither signalled nor cancelled.
KEPT = "kept"
KEPT_NOTE = "not requeueable: not signalled, requeued or cancelled; left to its owner"

# What a finished job shows until MinJobAge passes; asked for so the last look sees how it ended.
FINISHED_JOB_STATES = ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                       "DEADLINE", "OUT_OF_MEMORY", "REVOKED")
EVERY_JOB_STATE = tuple(sorted(ACTIVE_JOB_STATES)) + FINISHED_JOB_STATES


def on_node(job: SlurmJob, node: str) -> bool:
    """The job holds the node: active and allocated there (a requeued job is PENDING, on no node)."""
    return job.active and job.state != "PENDING" and node in job.nodes


@dataclass
class JobFate:
    job_id: str
    name: Optional[str]
    requeue: Optional[bool]
    signalled: bool = False
    fate: Optional[str] = None  # LEFT, REQUEUED, CANCELLED or KEPT
    state: Optional[str] = None  # the job's state at the last look; None: Slurm lists it no more
    note: Optional[str] = None
    gpus: Optional[int] = None  # what the job held (what it cost while away: remediation/cost.py)

    def as_dict(self) -> Dict[str, Any]:
        return dict(job_id=self.job_id, name=self.name, signalled=self.signalled, fate=self.fate, state=self.state,
                    requeue=self.requeue, note=self.note, gpus=self.gpus)


class EvacuationError(SlurmError):
    """A Slurm call failed halfway; says which jobs this run had signalled already (for skip_signal)."""

    def __init__(self, cause: SlurmError, signalled: Sequence[str], command: Sequence[Sequence[str]]) -> None:
        super().__init__("%s (evacuation stopped; jobs signalled by this run: %s)" % (
            cause, ", ".join(signalled) or "none"))
        self.cause = cause
        self.signalled = list(signalled)
        self.command = [list(argv) for argv in command]

    def details(self) -> Dict[str, Any]:
        return dict(self.cause.details(), signalled=self.signalled, command=self.command)


def node_jobs(client: Any, node: str, only: Optional[Iterable[str]] = None) -> List[SlurmJob]:
    """The jobs running (or suspended, completing) on ``node`` (those in ``only`` alone, when given); an
    unknown node is SlurmUnknownNodeError."""
    check_node(node)
    client.nodes([node], future=True, with_jobs=False)
    wanted = None if only is None else set(only)
    return [job for job in client.jobs(nodes=[node])
            if on_node(job, node) and (wanted is None or job.job_id in wanted)]


def list_jobs(client: Any, node: str, only: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    """What ``state=listed`` returns."""
    jobs = node_jobs(client, node, only)
    return dict(changed=False, jobs=[job.as_dict() for job in jobs], signalled=[], waited=0.0, command=[])


def check_evacuation(node: str, signal: str = "TERM", grace: float = 120.0, poll: float = 1.0, then: str = "requeue",
                     skip_signal: Optional[Iterable[Any]] = None, return_after: Optional[float] = None,
                     grace_started: Optional[float] = None, job_ids: Optional[Iterable[Any]] = None,
                     only_requeueable: bool = False) -> Dict[str, Any]:
    """The options checked and normalised; bad input is a FieldError naming the option. ``job_ids``: only
    these jobs of the node (a stalled job's remediation); None: all of them."""
    check_node(node)
    if then not in THEN:
        raise FieldError("then", "must be one of %s, not %r" % (", ".join(THEN), then))
    check_number(grace, "grace", minimum=0)
    check_number(poll, "poll", above=0)
    if return_after is not None:
        check_number(return_after, "return_after", above=0)
    if grace_started is not None:
        check_number(grace_started, "grace_started", above=0)
    if not isinstance(only_requeueable, bool):
        raise FieldError("only_requeueable", "must be true or false, not %r" % (only_requeueable,))
    only = None if job_ids is None else set(check_job_ids(list(job_ids), "job_ids"))
    return dict(signal=check_signal(signal), skip=set(check_job_ids(list(skip_signal or []), "skip_signal",
                                                                    allow_empty=True)), only=only)


def _kept(jobs: List[SlurmJob], only_requeueable: bool) -> Tuple[List[SlurmJob], List[JobFate]]:
    """The jobs to act on, and (with ``only_requeueable``) the fates of those that may not be requeued,
    which are left alone: a stalled job that cannot come back is its owner's to end."""
    if not only_requeueable:
        return jobs, []
    kept = [JobFate(job_id=job.job_id, name=job.name, requeue=job.requeue, gpus=job.gpus, fate=KEPT, state=job.state,
                    note=KEPT_NOTE) for job in jobs if job.requeue is False]
    return [job for job in jobs if job.requeue is not False], kept


def signal_only(client: Any, node: str, signal: str = "TERM", skip_signal: Optional[Iterable[Any]] = None,
                job_ids: Optional[Iterable[Any]] = None, only_requeueable: bool = False,
                **_ignored: Any) -> Dict[str, Any]:
    """What ``state=signalled`` returns: the node's jobs signalled (but those in ``skip_signal``), no wait.

    The remediation records the ids it returns before it waits, so that a rerun after a crash in
    the wait does not signal them again; only a crash inside this call can signal a job twice.
    """
    checked = check_evacuation(node, signal, skip_signal=skip_signal, job_ids=job_ids,
                               only_requeueable=only_requeueable)
    jobs, fates = _kept(node_jobs(client, node, checked["only"]), only_requeueable)
    command: List[List[str]] = []
    signalled: List[str] = []
    try:
        for job in jobs:
            fate = JobFate(job_id=job.job_id, name=job.name, requeue=job.requeue, gpus=job.gpus)
            fate.state = job.state
            fates.append(fate)
            if job.job_id in checked["skip"] or job.completing:
                continue
            result = _tolerant(client, node, job.job_id, lambda job_id: client.signal_jobs([job_id], checked["signal"]))
            if result is None:
                fate.fate = LEFT
                continue
            command.append(list(result.argv))
            fate.signalled = True
            signalled.append(job.job_id)
    except SlurmError as exc:
        raise EvacuationError(exc, signalled, command) from exc
    return dict(changed=bool(command), jobs=[fate.as_dict() for fate in fates], signalled=signalled, waited=0.0,
                command=command)


def evacuate(client: Any, node: str, signal: str = "TERM", grace: float = 120.0, poll: float = 1.0,
             then: str = "requeue", skip_signal: Optional[Iterable[Any]] = None,
             return_after: Optional[float] = None, grace_started: Optional[float] = None,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             wall: Callable[[], float] = time.time,
             on_signalled: Optional[Callable[[List[str]], None]] = None,
             job_ids: Optional[Iterable[Any]] = None, only_requeueable: bool = False) -> Dict[str, Any]:
    """What ``state=evacuated`` returns: changed, done, jobs (each with its fate), signalled, waited,
    command, grace_started and grace_left.

    ``on_signalled(ids)`` is called with the jobs this call signalled, once they all have the signal
    and before the wait: the remediation records them there, so that a rerun after a crash in the
    wait does not signal them again. ``return_after``: seconds this call waits at most before it
    returns ``done=false`` (the grace not over, jobs still on the node); ``grace_started``: when an
    earlier call of the same evacuation started the grace (``time.time()``), so it ends as it would
    have in one call. ``job_ids``: only these jobs of the node are signalled, waited for, requeued or
    cancelled (a stalled job's remediation); the others are not touched. ``only_requeueable``: a job
    that may not be requeued is not touched either, and is reported with fate ``kept``."""
    checked = check_evacuation(node, signal, grace, poll, then, skip_signal, return_after, grace_started, job_ids,
                               only_requeueable)
    only = checked["only"]
    jobs, kept = _kept(node_jobs(client, node, only), only_requeueable)
    if not jobs and not checked["skip"]:
        return dict(changed=False, done=True, jobs=[fate.as_dict() for fate in kept], signalled=[], waited=0.0,
                    command=[], grace_started=wall() if grace_started is None else float(grace_started),
                    grace_left=0.0)
    fates = {job.job_id: JobFate(job_id=job.job_id, name=job.name, requeue=job.requeue, gpus=job.gpus) for job in jobs}
    fates.update((fate.job_id, fate) for fate in kept)
    # Jobs signalled earlier that have left the node already are accounted for too: the report
    # names every job the node had, not only those still there.
    for job_id in sorted(checked["skip"] - set(fates)):
        fates[job_id] = JobFate(job_id=job_id, name=None, requeue=None, signalled=True, fate=LEFT)
    command: List[List[str]] = []
    signalled: List[str] = []
    try:
        for job in jobs:
            if job.job_id in checked["skip"]:
                fates[job.job_id].signalled = True  # by an earlier call (state=signalled, or a crashed run)
                continue
            if job.completing:
                continue  # it has ended and is giving the node back
            result = _tolerant(client, node, job.job_id, lambda job_id: client.signal_jobs([job_id], checked["signal"]))
            if result is None:
                fates[job.job_id].fate = LEFT
                continue
            command.append(list(result.argv))
            fates[job.job_id].signalled = True
            signalled.append(job.job_id)
        if on_signalled is not None and signalled:
            on_signalled(list(signalled))

        waiting = [job_id for job_id, fate in fates.items() if fate.fate is None]
        # The grace begins once every job has the signal (or began in an earlier slice).
        began = wall() if grace_started is None else float(grace_started)
        started = clock()
        # The grace is counted from when it began, in this call or an earlier slice of it.
        deadline = started + max(0.0, began + grace - wall())
        until = deadline if return_after is None else min(deadline, started + return_after)
        if client.check_mode:
            latest = {job.job_id: job for job in jobs}
            still = waiting
        else:
            while True:
                latest = {job.job_id: job for job in client.jobs(nodes=[node]) if only is None or job.job_id in only}
                still = [job_id for job_id in waiting if job_id in latest and on_node(latest[job_id], node)]
                now = clock()
                if not still or now >= until:
                    break
                sleep(max(0.0, min(poll, until - now)))
        waited = round(clock() - started, 2)
        grace_left = round(max(0.0, deadline - clock()), 2)
        if still and grace_left > 0 and not client.check_mode:
            # A slice ended before the grace: say where the wait is; nothing requeued or cancelled yet.
            for job_id in waiting:
                fates[job_id].fate = None if job_id in still else LEFT
                fates[job_id].state = latest[job_id].state if job_id in latest else None
            return dict(changed=bool(command), done=False, jobs=[fate.as_dict() for fate in fates.values()],
                        signalled=signalled, waited=waited, command=command, grace_started=began,
                        grace_left=grace_left)

        for job_id in waiting:
            fate = fates[job_id]
            if job_id not in still:
                fate.fate = LEFT
                continue
            job = latest[job_id]
            if job.completing:
                fate.fate, fate.note = LEFT, "completing after the grace; left to end"
                continue
            if then == "requeue" and job.requeue is not False:
                result = _tolerant(client, node, job_id, lambda job_id: client.requeue([job_id]), refused_ok=True)
                if result is None:
                    fate.fate = LEFT
                    continue
                if not isinstance(result, SlurmCommandError):
                    command.append(list(result.argv))
                    fate.fate = REQUEUED
                    if job.requeue is None:
                        fate.note = "requeue flag unknown; requeued as Slurm's default JobRequeue=1 allows"
                    continue
                fate.note = "requeue refused (%s); cancelled" % (result.stderr.strip() or result.rc)
            result = _tolerant(client, node, job_id, lambda job_id: client.cancel([job_id]))
            if result is None:
                fate.fate = LEFT
                continue
            command.append(list(result.argv))
            fate.fate = CANCELLED
    except SlurmError as exc:
        raise EvacuationError(exc, signalled, command) from exc

    if client.check_mode:
        for job in jobs:
            fates[job.job_id].state = job.state
    else:
        try:
            now_jobs = _last_look(client, fates)
            if _requeue_the_killed(client, fates, now_jobs, command):
                now_jobs = _last_look(client, fates)
        except SlurmError as exc:
            raise EvacuationError(exc, signalled, command) from exc
    return dict(changed=bool(command), done=True, jobs=[fate.as_dict() for fate in fates.values()],
                signalled=signalled, waited=waited, command=command, grace_started=began, grace_left=0.0)


def _last_look(client: Any, fates: Dict[str, JobFate]) -> Dict[str, SlurmJob]:
    """Each job's state now (None: Slurm lists it no more), and the name of those known only by id."""
    now_jobs = {job.job_id: job for job in client.jobs(states=EVERY_JOB_STATE)}
    for job_id, fate in fates.items():
        fate.state = now_jobs[job_id].state if job_id in now_jobs else None
        if fate.name is None and job_id in now_jobs:
            fate.name, fate.requeue = now_jobs[job_id].name, now_jobs[job_id].requeue
    return now_jobs


def killed_by_the_signal(fate: JobFate, job: Optional[SlurmJob], requeue_exit: Callable[[], Sequence[int]]) -> bool:
    """A job we signalled that left and ended FAILED: its batch script died of (or failed after) the
    signal instead of exiting with the RequeueExit code, so slurmctld did not requeue it.

    A job that did exit with a RequeueExit code reads FAILED too for a moment (22.05's JSON shows
    the base state without the REQUEUED flag) while slurmctld requeues it: that one is left alone.
    ``requeue_exit`` reads the codes, only when a job needs them.
    """
    if not (fate.signalled and fate.fate == LEFT and job is not None and job.state == "FAILED"):
        return False
    if "REQUEUED" in job.flags:
        return False
    if job.exit_code is not None and job.exit_code in requeue_exit():
        fate.note = "exited %d, a RequeueExit code: slurmctld requeues it" % job.exit_code
        return False
    return True


def _requeue_the_killed(client: Any, fates: Dict[str, JobFate], now_jobs: Dict[str, SlurmJob],
                        command: List[List[str]]) -> bool:
    """Requeue each job the signal ended FAILED; report those that cannot be. True if any was requeued."""
    requeued = False
    # Read once, and only if a job needs it (scontrol show config is a round trip to slurmctld).
    requeue_exit = functools.lru_cache(maxsize=None)(lambda: tuple(client.requeue_exit_codes()))

    for job_id, fate in fates.items():
        job = now_jobs.get(job_id)
        if not killed_by_the_signal(fate, job, requeue_exit):
            continue
        if job.requeue is False:
            fate.note = ("ended FAILED on the signal and is not requeueable (--no-requeue): its work since its "
                         "last checkpoint is lost; resubmit it")
            continue
        try:
            result = client.requeue([job_id])
        except SlurmTimeoutError:
            raise
        except SlurmCommandError as exc:
            fate.note = "ended FAILED on the signal; requeue refused (%s)" % (exc.stderr.strip() or exc.rc)
            continue
        command.append(list(result.argv))
        fate.fate = REQUEUED
        fate.note = ("ended FAILED on the signal (its batch script did not exit with the RequeueExit code "
                     "after a checkpoint); requeued")
        requeued = True
    return requeued


def _tolerant(client: Any, node: str, job_id: str, call: Callable[[str], Any], refused_ok: bool = False) -> Any:
    """``call(job_id)``'s result; None when it failed because the job left the node meanwhile.

    With ``refused_ok`` a refusal for a job still on the node is returned (the error), not raised.
    A timeout is never taken for "the job left": it is raised.
    """
    try:
        return call(job_id)
    except SlurmTimeoutError:
        raise
    except SlurmCommandError as exc:
        still = [job for job in client.jobs(nodes=[node]) if job.job_id == job_id and on_node(job, node)]
        if not still:
            return None
        if refused_ok:
            return exc
        raise


def slurm_jobs(client: Any, node: str, state: str = "listed", **options: Any) -> Dict[str, Any]:
    """The slurm_jobs module's one call: ``listed`` or ``evacuated``."""
    if state == "listed":
        checked = check_evacuation(node, **options)
        return list_jobs(client, node, checked["only"])
    if state == "evacuated":
        return evacuate(client, node, **options)
    if state == "signalled":
        return signal_only(client, node, **options)
    raise FieldError("state", "must be listed, signalled or evacuated, not %r" % (state,))
