# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Typed Slurm calls over the runner: what the modules, the remediation loop and the agent use.

Reads pick the best source the version has:

- nodes: ``scontrol --json show node`` (23.02+); else ``sinfo --json`` (21.08+); else, and for
  FUTURE nodes on 22.05 (whose sinfo has no ``--future``), ``scontrol --future --oneliner show
  node``. It always asks for every node and filters here: 22.05 refuses ``scontrol show node A B``.
- jobs: ``squeue --all --json`` (``--states=all`` too from 23.02), else a fixed ``--format``;
  filtered here, because 22.05's ``--json`` ignores squeue's filter options.

Writes (``set_node_state``, ``signal_jobs``, ``requeue``, ``cancel``, ``submit``) check their input before
anything runs: a job id such as ``--me`` would make scancel cancel every job of the user, and a
node name is one node, never a host list, so a remediation acts on exactly what it meant. In
check mode they run nothing and return the argv they would have run.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import MAX_NODE_NAME, check_name, check_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.batch import SBATCH_OPTIONS, BatchJob
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmTimeoutError,
    SlurmUnknownNodeError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import (
    SlurmJob,
    SlurmNode,
    SlurmVersion,
    check_job_ids,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import (
    parse_nodes_json,
    parse_nodes_text,
    parse_ping,
    parse_requeue_exit,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_sinfo import parse_sinfo_json
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_squeue import (
    SQUEUE_FORMAT,
    filter_jobs,
    jobs_by_node,
    parse_jobs_json,
    parse_squeue_text,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import (
    CommandResult,
    SlurmRunner,
)

NODE_STATES = ("DOWN", "DRAIN", "RESUME", "FUTURE", "UNDRAIN")
# Slurm records who set a reason and when; these states take one, and require it.
STATES_WITH_REASON = ("DOWN", "DRAIN")

# What scancel says about a job that has ended (or was purged): nothing to cancel.
_JOB_GONE = re.compile(r"already completing or completed|Invalid job id specified", re.I)
# Slurm (unlike Kubernetes) allows upper case and '_' in node names; never a leading '-' (an option) and
# never a host list ("gpu-[1-4]", "a,b"). Capped like a Kubernetes name: a 5,000-character one reached scontrol.
_NODE_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,%d}" % (MAX_NODE_NAME - 1)
_RESERVATION_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_SIGNAL = re.compile(r"(SIG)?[A-Z][A-Z0-9+]{0,15}|[0-9]{1,2}")
_FEATURE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
# A reason is printed on one line; a newline would cut it in `scontrol show node` text.
MAX_REASON = 1024


class SlurmClient:
    def __init__(self, runner: SlurmRunner) -> None:
        self.runner = runner

    @property
    def check_mode(self) -> bool:
        return self.runner.check_mode

    def check_credentials(self) -> None:
        """Nothing to read ahead: the commands authenticate with munge themselves (the REST client
        reads its token here, so a start-up check names a missing key file)."""

    def version(self) -> SlurmVersion:
        return self.runner.version()

    def ping(self) -> List[Dict[str, str]]:
        """Each controller and its state (UP or DOWN); rc 1 with a DOWN controller is an answer too."""
        try:
            out = self.runner.run("scontrol", "action", action=["ping"]).stdout
        except SlurmTimeoutError:
            raise
        except SlurmCommandError as exc:
            # scontrol ping exits 1 when a controller is DOWN and still prints every state.
            controllers = parse_ping(exc.stdout)
            if not controllers:
                raise
            return controllers
        return parse_ping(out)

    def nodes(self, names: Optional[Sequence[str]] = None, future: bool = False,
              with_jobs: bool = True) -> Dict[str, SlurmNode]:
        """Name -> SlurmNode, in Slurm's order; ``names`` must all exist (SlurmUnknownNodeError)."""
        runner = self.runner
        if runner.has_json("scontrol"):
            result = runner.run("scontrol", "future json action", future=future, json=True, action=["show", "node"])
            found = parse_nodes_json(result.stdout)
        elif future or not runner.has_json("sinfo"):
            result = runner.run("scontrol", "future oneliner action", future=future, oneliner=True,
                                action=["show", "node"])
            found = parse_nodes_text(result.stdout)
        else:
            result = runner.run("sinfo", "json", json=True)
            found = parse_sinfo_json(result.stdout)
        found = select_nodes(found, names, future, result.argv, result.rc)
        return with_their_jobs(found, self.jobs()) if with_jobs else found

    def jobs(self, nodes: Optional[Sequence[str]] = None, states: Optional[Sequence[str]] = None) -> List[SlurmJob]:
        """Jobs on any of ``nodes`` (default: all) in any of ``states`` (default: not finished)."""
        if self.runner.has_json("squeue"):
            # --states=all from 23.02 on: 26.05 applies squeue's default filter to --json too and leaves
            # out the jobs that have ended (a job that finished in its grace would look gone). 22.05
            # lists them without it, and with it also lists jobs that keep nodes as they complete.
            if self.runner.version().at_least(23, 2):
                out = self.runner.run("squeue", "all states json", all=True, states="all", json=True).stdout
            else:
                out = self.runner.run("squeue", "all json", all=True, json=True).stdout
            jobs = parse_jobs_json(out)
        else:
            out = self.runner.run("squeue", "all noheader states format", all=True, noheader=True,
                                  states="all", format=SQUEUE_FORMAT).stdout
            jobs = parse_squeue_text(out)
        return filter_jobs(jobs, nodes=nodes, states=states)

    def requeue_exit_codes(self) -> List[int]:
        """slurm.conf's RequeueExit codes (``scontrol show config``): a batch job that exits with one
        is requeued by slurmctld itself."""
        return parse_requeue_exit(self.runner.run("scontrol", "action", action=["show", "config"]).stdout)

    def set_node_state(self, node: str, state: str, reason: Optional[str] = None) -> CommandResult:
        """``scontrol update NodeName=<node> State=<state> [Reason=<reason>]``."""
        check_node(node)
        state = check_node_state(state, reason)
        return self.runner.run("scontrol", "action node_name state reason", mutating=True, nodes=[node],
                               action=["update"], node_name=node, state=state, reason=reason)

    def set_node_placement(self, node: str, weight: int, features: Sequence[str],
                           active_features: Sequence[str]) -> CommandResult:
        """``scontrol update NodeName=<node> Weight=<n> AvailableFeatures=<a,b> ActiveFeatures=<a,b>``.

        22.05 without a node_features plugin takes both feature lists (active must be a subset of
        available, else "Active features not subset of available features"), and an empty list
        clears them. ``scontrol reconfigure`` and a slurmctld restart put slurm.conf's values back.
        """
        weight, available, active = check_placement(node, weight, features, active_features)
        return self.runner.run("scontrol", "action node_name weight available_features active_features",
                               mutating=True, nodes=[node], action=["update"], node_name=node, weight=weight,
                               available_features=",".join(available), active_features=",".join(active))

    def signal_jobs(self, job_ids: Sequence[Any], signal: str = "TERM", full: bool = True,
                    batch: bool = False) -> CommandResult:
        """``scancel --signal=TERM --full <ids>``: without --full the batch script is not signalled.

        ``batch``: ``--batch``, the batch step alone; slurmctld then delivers a KILL as a signal
        instead of turning it into a cancel (SIGTERM first, and a grace the job would save in)."""
        ids = check_job_ids(job_ids)
        signal = check_signal(signal)
        return self.runner.run("scancel", "signal batch full job_ids", mutating=True, signal=signal, batch=batch,
                               full=full, job_ids=ids)

    def requeue(self, job_ids: Sequence[Any]) -> CommandResult:
        """``scontrol requeue <id,id>``: the jobs go back to PENDING and restart elsewhere."""
        return self.runner.run("scontrol", "action job_list", mutating=True, action=["requeue"],
                               job_list=check_job_ids(job_ids))

    def cancel(self, job_ids: Sequence[Any]) -> CommandResult:
        """``scancel <ids>``."""
        return self.runner.run("scancel", "job_ids", mutating=True, job_ids=check_job_ids(job_ids))

    def cancel_unless_gone(self, job_id: Any) -> Optional[CommandResult]:
        """``scancel <id>``, or None when Slurm says the job has already ended or is unknown:
        a rollback that finds its load job gone has nothing left to stop."""
        return unless_gone(lambda: self.cancel([job_id]))

    def reservation_exists(self, name: str) -> bool:
        """``scontrol show reservation <name>``: False when Slurm says it is not there."""
        check_reservation(name)
        try:
            self.runner.run("scontrol", "oneliner action", oneliner=True, action=["show", "reservation", name])
        except SlurmCommandError as exc:
            if "not found" in (exc.stderr or "") + (exc.stdout or ""):
                return False
            raise
        return True

    def create_reservation(self, name: str, node: str, users: str) -> CommandResult:
        """A maintenance reservation of ``node`` for ``users`` alone, from now until it is deleted:
        ``scontrol create reservation ReservationName=<name> Nodes=<node> StartTime=now
        Duration=UNLIMITED Users=<users> Flags=MAINT,IGNORE_JOBS``. Only their jobs that name it
        may start there; a job already running is left alone (IGNORE_JOBS)."""
        check_node(node)
        check_reservation(name)
        return self.runner.run(
            "scontrol", "action reservation_name reservation_nodes start_time duration users flags", mutating=True,
            nodes=[node], action=["create", "reservation"], reservation_name=name, reservation_nodes=node,
            start_time="now", duration="UNLIMITED", users=users, flags="MAINT,IGNORE_JOBS")

    def delete_reservation(self, name: str) -> Optional[CommandResult]:
        """``scontrol delete reservation <name>``; None when it is not there (deleted before a crash)."""
        if not self.reservation_exists(name):
            return None
        return self.runner.run("scontrol", "action", mutating=True, action=["delete", "reservation", name])

    def submit(self, job: BatchJob) -> Tuple[Optional[str], CommandResult]:
        """``sbatch --parsable -w <node> ... --wrap '<command>'``: the job id (None in check mode) and the call."""
        check_node(job.node)
        result = self.runner.run("sbatch", SBATCH_OPTIONS, mutating=True, nodes=[job.node], **job.sbatch_values())
        return (parse_sbatch_parsable(result.stdout, result.argv, job.name) if result.ran else None), result

    def job_stdout(self, job_id: Any) -> str:
        """The job's output file (``StdOut`` of ``scontrol --oneliner show job``)."""
        job_id = check_job_ids([job_id], "job_id")[0]
        out = self.runner.run("scontrol", "oneliner action", oneliner=True, action=["show", "job", job_id]).stdout
        match = re.search(r"(?:^|\s)StdOut=(\S+)", out)
        if not match:
            raise GpufleetError("scontrol show job %s names no StdOut" % job_id)
        return match.group(1)


def unless_gone(cancel: Callable[[], CommandResult]) -> Optional[CommandResult]:
    """``cancel()``, or None when Slurm says the job has already ended or is unknown (either transport)."""
    try:
        return cancel()
    except SlurmTimeoutError:
        raise
    except SlurmCommandError as exc:
        if _JOB_GONE.search(exc.stderr or ""):
            return None
        raise


def parse_sbatch_parsable(text: str, argv: Optional[List[str]] = None, name: str = "?") -> str:
    """``sbatch --parsable`` prints ``<job id>`` or ``<job id>;<cluster>``."""
    first = (text or "").strip().splitlines()[0:1]
    job_id = first[0].split(";", 1)[0].strip() if first else ""
    try:
        return check_job_ids([job_id], field="job_id")[0]
    except FieldError:
        raise GpufleetError("%s printed no job id (%r); the job, if any, is named %s"
                            % (shlex.join(argv or ["sbatch"]), (text or "")[:200], name)) from None


def select_nodes(found: Dict[str, SlurmNode], names: Optional[Sequence[str]], future: bool, argv: List[str],
                 rc: Optional[int]) -> Dict[str, SlurmNode]:
    """``names`` of ``found`` (all when None), each of which must exist (SlurmUnknownNodeError, naming
    the call ``argv`` that listed them)."""
    if names is None:
        return found
    missing = [name for name in names if name not in found]
    if missing:
        hint = "" if future else " (FUTURE nodes are listed only with future)"
        raise SlurmUnknownNodeError(argv, missing, rc=rc, hint=hint)
    wanted = set(names)
    return {name: node for name, node in found.items() if name in wanted}


def with_their_jobs(found: Dict[str, SlurmNode], jobs: Sequence[SlurmJob]) -> Dict[str, SlurmNode]:
    """Each node with the active jobs that hold it."""
    on_node = jobs_by_node(jobs)
    return {name: node.with_jobs(on_node.get(name, ())) for name, node in found.items()}


def check_node(node: Any, field: str = "node") -> str:
    """``node`` if it is one node name (never a host list or an option); else FieldError(field)."""
    return check_name(node, field, _NODE_NAME, "one node name (letters, digits, '.', '_', '-'; at most %d, "
                      "starting with a letter or digit)" % MAX_NODE_NAME)


def check_reservation(name: Any, field: str = "reservation") -> str:
    """A reservation name of ours (``gpufleet-validate-<hash>``, ``gpufleet-return-<node>``): a word
    that no shell, URL or ``scontrol`` argument reads as anything else."""
    return check_name(name, field, _RESERVATION_NAME, "a reservation name (letters, digits, '.', '_', '-'; at "
                      "most 64, starting with a letter or digit)")


def check_placement(node: str, weight: Any, features: Sequence[Any],
                    active_features: Sequence[Any]) -> Tuple[int, List[str], List[str]]:
    """A node's scheduling weight and feature lists, checked for either transport: (weight,
    features, active features); active must be a subset of available (22.05 refuses otherwise)."""
    check_node(node)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight < 2**32 - 1:
        raise FieldError("weight", "must be an integer in 0..%d, not %r" % (2**32 - 2, weight))
    lists = {}
    for name, values in (("features", features), ("active_features", active_features)):
        words = [str(value) for value in values]
        bad = [word for word in words if not _FEATURE.fullmatch(word)]
        if bad:
            raise FieldError(name, "must be feature names (letters, digits, '_', '.', '-'), not %s" % bad)
        lists[name] = words
    if not set(lists["active_features"]) <= set(lists["features"]):
        raise FieldError("active_features", "must be a subset of features")
    return weight, lists["features"], lists["active_features"]


def check_node_state(state: Any, reason: Optional[str]) -> str:
    """The state upper case, one of NODE_STATES, with a reason where it needs one and only there."""
    state = str(state).upper()
    if state not in NODE_STATES:
        raise FieldError("state", "must be one of %s, not %r" % (", ".join(NODE_STATES), state))
    if state in STATES_WITH_REASON:
        if not reason or not reason.strip():
            raise FieldError("reason", "is required to set a node %s" % state)
        check_text(reason, "reason", MAX_REASON)
    elif reason is not None:
        raise FieldError("reason", "only %s take a reason, not %s" % (" and ".join(STATES_WITH_REASON), state))
    return state


def check_signal(signal: Any, field: str = "signal") -> str:
    """The signal upper case (``TERM``, ``SIGUSR1``, ``15``); else FieldError(field)."""
    text = str(signal).upper()
    if not _SIGNAL.fullmatch(text):
        raise FieldError(field, "must be a signal name or number, not %r" % text)
    return text
