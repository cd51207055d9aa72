# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Run Slurm's commands the one way: argv built from declared formats, a fixed environment, a
timeout, typed errors, and check mode at the side-effect boundary.

The shape is community.general's CmdRunner (its ``_cmd_runner.py`` is private to that collection,
so this copies the idea, not the code): each command declares how every option becomes argv words
(``SLURM_COMMANDS``), and a call names the options in the order they go on the command line.
Unlike CmdRunner it takes a *run function* ``run(argv, env, timeout) -> (rc, stdout, stderr)``
instead of an ``AnsibleModule``, so the agent process uses it with ``subprocess_run`` and a
module with ``module_run_function(module)``. A run function raises ``TimeoutError`` when the
timeout passes and ``OSError`` when the program cannot start; the runner turns both, and any
non-zero exit, into a typed error that carries the argv, the exit status and stderr.

Every command runs with ``LC_ALL=C``: Slurm prints dates and numbers in the locale, and the
parsers read the C locale. ``SLURM_CONF`` is set when a configuration is given, so the lab and a
site with several clusters talk to the right slurmctld.

``--json`` exists for sinfo and squeue since 21.08 and for scontrol since 23.02 (22.05's
scontrol answers "unrecognized option '--json'"). The runner asks ``scontrol --version`` once and
keeps the answer.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_number
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmTimeoutError,
    command_error,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmVersion
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import parse_version

RunFunction = Callable[[List[str], Dict[str, str], Optional[float]], Tuple[int, str, str]]
ArgFormat = Callable[[Any], List[str]]

DEFAULT_TIMEOUT = 30.0
# The first release where each command has --json.
JSON_SINCE = {"sinfo": (21, 8), "squeue": (21, 8), "scontrol": (23, 2)}


class Fmt:
    """Argument formats: each turns one option's value into argv words; None always gives none."""

    @staticmethod
    def flag(option: str) -> ArgFormat:
        """``--future`` when the value is true."""
        return lambda value: [option] if value else []

    @staticmethod
    def opt_eq(option: str) -> ArgFormat:
        """``--signal=TERM``: one word, so a value can never be read as another option."""
        return lambda value: [] if value is None else ["%s=%s" % (option, value)]

    @staticmethod
    def key_value(key: str) -> ArgFormat:
        """scontrol's ``NodeName=gpu-a-001``, ``Reason=<text with spaces>``: one argv word each."""
        return lambda value: [] if value is None else ["%s=%s" % (key, value)]

    @staticmethod
    def words() -> ArgFormat:
        """A list of words as they are: ``["show", "node"]``, job ids for scancel."""
        return lambda value: [] if value is None else [str(word) for word in value]

    @staticmethod
    def joined(sep: str = ",") -> ArgFormat:
        """A list as one word: scontrol requeue takes ``12,13``."""
        return lambda value: [] if not value else [sep.join(str(word) for word in value)]


# Every option the client uses, per command. Global options (--json, --future, --oneliner)
# must come before scontrol's sub-command; the call's option order puts them there.
SLURM_COMMANDS: Dict[str, Dict[str, ArgFormat]] = {
    "scontrol": {
        "version": Fmt.flag("--version"),
        "future": Fmt.flag("--future"),
        "oneliner": Fmt.flag("--oneliner"),
        "json": Fmt.flag("--json"),
        "action": Fmt.words(),
        "node_name": Fmt.key_value("NodeName"),
        "state": Fmt.key_value("State"),
        "reason": Fmt.key_value("Reason"),
        "weight": Fmt.key_value("Weight"),
        "available_features": Fmt.key_value("AvailableFeatures"),
        "active_features": Fmt.key_value("ActiveFeatures"),
        "job_list": Fmt.joined(","),
        # A validation job's reservation (remediation/validation_run.py): the name is ours, derived
        # from a remediation id, and the node checked, so neither can read as another key.
        "reservation_name": Fmt.key_value("ReservationName"),
        "reservation_nodes": Fmt.key_value("Nodes"),
        "start_time": Fmt.key_value("StartTime"),
        "duration": Fmt.key_value("Duration"),
        "users": Fmt.key_value("Users"),
        "flags": Fmt.key_value("Flags"),
    },
    "sinfo": {
        "json": Fmt.flag("--json"),
    },
    "squeue": {
        "all": Fmt.flag("--all"),
        "json": Fmt.flag("--json"),
        "noheader": Fmt.flag("--noheader"),
        "states": Fmt.opt_eq("--states"),
        "format": Fmt.opt_eq("--format"),
    },
    "scancel": {
        "signal": Fmt.opt_eq("--signal"),
        "batch": Fmt.flag("--batch"),
        "full": Fmt.flag("--full"),
        "job_ids": Fmt.words(),
    },
    # The drills' batch jobs (batch.py). The node name is checked (check_node) before it gets here,
    # so it can never read as an option.
    "sbatch": {
        "parsable": Fmt.flag("--parsable"),
        "nodelist": lambda value: [] if value is None else ["-w", str(value)],
        "gres": Fmt.opt_eq("--gres"),
        "time": Fmt.opt_eq("--time"),
        "job_name": Fmt.opt_eq("--job-name"),
        "output": Fmt.opt_eq("--output"),
        "reservation": Fmt.opt_eq("--reservation"),
        # One argv word: sbatch wraps the string in a small sh script itself (man sbatch, --wrap).
        "wrap": lambda value: [] if value is None else ["--wrap", str(value)],
    },
}


@dataclass(frozen=True)
class CommandResult:
    """What a call ran (or, in check mode, would have run) and what it printed."""

    argv: List[str]
    env: Dict[str, str] = field(default_factory=dict)
    rc: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    ran: bool = True  # False: check mode skipped a mutating call

    def as_dict(self) -> Dict[str, Any]:
        return dict(cmd=list(self.argv), rc=self.rc, stdout=self.stdout, stderr=self.stderr, ran=self.ran)


def subprocess_run(argv: List[str], env: Dict[str, str], timeout: Optional[float]) -> Tuple[int, str, str]:
    """The default run function: the caller's environment plus ``env``; kills the child on timeout."""
    full_env = dict(os.environ)
    full_env.update(env)
    try:
        done = subprocess.run(argv, env=full_env, capture_output=True, text=True, timeout=timeout, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError("timed out after %ss" % timeout) from exc
    return done.returncode, done.stdout, done.stderr


def module_run_function(module: Any) -> RunFunction:
    """A run function over ``AnsibleModule.run_command``.

    ``run_command`` has no timeout, so the command runs under coreutils ``timeout`` when the host
    has it; its exit status 124 means the time ran out (no Slurm command exits 124 itself).
    """
    timeout_bin = module.get_bin_path("timeout")

    def run(argv: List[str], env: Dict[str, str], timeout: Optional[float]) -> Tuple[int, str, str]:
        command = list(argv)
        if timeout and timeout_bin:
            command = [timeout_bin, "--kill-after=5", "%g" % timeout, *command]
        # expand_user_and_vars=False: a reason such as "cost $5 ~ 1h" is the user's text and must
        # reach scontrol unchanged. handle_exceptions=False: a missing binary raises OSError here,
        # which the runner turns into a typed error, instead of run_command calling fail_json.
        rc, out, err = module.run_command(command, environ_update=dict(env), check_rc=False,
                                          expand_user_and_vars=False, handle_exceptions=False)
        if timeout and timeout_bin and rc == 124:
            raise TimeoutError("timed out after %ss" % timeout)
        return rc, out, err

    return run


class SlurmRunner:
    """Builds and runs Slurm command lines; one per cluster (SLURM_CONF) and caller."""

    def __init__(self, run: Optional[RunFunction] = None, slurm_conf: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, check_mode: bool = False,
                 bin_dir: Optional[str] = None,
                 commands: Optional[Mapping[str, Mapping[str, ArgFormat]]] = None) -> None:
        self.run_function: RunFunction = run or subprocess_run
        self.slurm_conf = slurm_conf
        self.timeout = timeout
        self.check_mode = check_mode
        self.bin_dir = bin_dir
        self.commands = commands or SLURM_COMMANDS
        self._version: Optional[SlurmVersion] = None

    @property
    def env(self) -> Dict[str, str]:
        env = {"LC_ALL": "C"}
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env

    def binary(self, command: str) -> str:
        return os.path.join(self.bin_dir, command) if self.bin_dir else command

    def argv(self, command: str, options: Union[str, Sequence[str]], **values: Any) -> List[str]:
        """The command line for ``options`` (names in command-line order) with their ``values``."""
        formats = self.commands.get(command)
        if formats is None:
            raise ValueError("no formats declared for command %r" % command)
        names = options.split() if isinstance(options, str) else list(options)
        unknown = [name for name in names if name not in formats] + [name for name in values if name not in names]
        if unknown:
            # A programming error, not a Slurm one: an option without a format, or a value
            # for an option the call did not place.
            raise ValueError("%s: options %s are not declared or not placed" % (command, unknown))
        argv = [self.binary(command)]
        for name in names:
            argv.extend(formats[name](values.get(name)))
        return argv

    def run(self, command: str, options: Union[str, Sequence[str]], mutating: bool = False,
            nodes: Sequence[str] = (), **values: Any) -> CommandResult:
        """Run it; a non-zero exit raises. A ``mutating`` call in check mode runs nothing.

        ``nodes`` names the nodes the call is about, for SlurmUnknownNodeError.
        """
        if self.timeout is not None:
            check_number(self.timeout, "timeout", above=0)  # NaN would run forever; checked before any command
        argv = self.argv(command, options, **values)
        env = self.env
        if mutating and self.check_mode:
            return CommandResult(argv=argv, env=env, ran=False)
        try:
            rc, out, err = self.run_function(list(argv), dict(env), self.timeout)
        except TimeoutError as exc:
            raise SlurmTimeoutError(argv, self.timeout, stderr=str(exc)) from None
        except OSError as exc:
            raise SlurmCommandError(argv, None, stderr=str(exc)) from None
        if rc != 0:
            raise command_error(argv, rc, out, err, nodes=nodes)
        return CommandResult(argv=argv, env=env, rc=rc, stdout=out, stderr=err)

    def version(self) -> SlurmVersion:
        """``scontrol --version``, asked once per runner."""
        if self._version is None:
            self._version = parse_version(self.run("scontrol", "version", version=True).stdout)
        return self._version

    def has_json(self, command: str) -> bool:
        since = JSON_SINCE.get(command)
        return since is not None and self.version().at_least(*since)
