# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Provider ``command``: replace a node by running the site's own command (a cloud CLI, a ticket).

The command is an argv list, run without a shell; ``{node}`` and ``{remediation_id}`` in any word
are replaced by the node's name and the remediation id (only those two: other braces stay as
they are, so a JSON argument needs no escaping). The command also gets them as ``GPUFLEET_NODE``
and ``GPUFLEET_REMEDIATION_ID`` in its environment.

Nothing here can tell whether the command already ran: it must be idempotent itself, or be
called once (the remediation records the replace phase as done, so a rerun skips it).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError

RunFunction = Callable[[List[str], Dict[str, str], Optional[float]], Tuple[int, str, str]]
PLACEHOLDERS = ("{node}", "{remediation_id}")
OUTPUT_TAIL = 2000


class CommandFailed(GpufleetError):
    """The command exited non-zero, timed out, or could not start."""

    def __init__(self, message: str, argv: Sequence[str], rc: Optional[int], stdout: str = "",
                 stderr: str = "") -> None:
        super().__init__(message)
        self.argv = list(argv)
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    def details(self) -> Dict[str, Any]:
        return dict(cmd=self.argv, rc=self.rc, stdout=self.stdout, stderr=self.stderr)


@dataclass
class CommandOutcome:
    changed: bool
    argv: List[str]
    rc: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    actions: List[str] = field(default_factory=list)


def command_argv(template: Any, node: str, remediation_id: Optional[str]) -> List[str]:
    """The argv to run (pure); FieldError('command') for anything but a non-empty list of words."""
    if not isinstance(template, (list, tuple)) or not template:
        raise FieldError("command", "must be a non-empty list of words (the program, then its arguments)")
    argv = []
    for index, word in enumerate(template):
        if not isinstance(word, str):
            raise FieldError("command[%d]" % index, "must be a string, not %r" % (word,))
        if "{remediation_id}" in word and not remediation_id:
            raise FieldError("remediation_id", "is required: command[%d] uses {remediation_id}" % index)
        argv.append(word.replace("{node}", node).replace("{remediation_id}", remediation_id or ""))
    if not argv[0]:
        raise FieldError("command[0]", "must name the program to run")
    return argv


def run_replace_command(run: RunFunction, template: Any, node: str, remediation_id: Optional[str] = None,
                        timeout: Optional[float] = None, check_mode: bool = False) -> CommandOutcome:
    argv = command_argv(template, node, remediation_id)
    if shutil.which(argv[0]) is None:
        raise FieldError("command[0]", "%r is not an executable program (looked up in PATH when no path is given)"
                         % argv[0])
    shown = " ".join(argv)
    if check_mode:
        return CommandOutcome(changed=True, argv=argv, actions=["run %s" % shown])
    env = {"GPUFLEET_NODE": node}
    if remediation_id:
        env["GPUFLEET_REMEDIATION_ID"] = remediation_id
    try:
        rc, out, err = run(list(argv), env, timeout)
    except TimeoutError:
        raise CommandFailed("command timed out after %ss: %s" % (timeout, shown), argv, None) from None
    except OSError as exc:
        raise CommandFailed("command could not start: %s: %s" % (argv[0], exc.strerror or exc), argv, None) from None
    if rc != 0:
        tail = (err or out or "").strip()[-OUTPUT_TAIL:]
        raise CommandFailed("command exited %d: %s%s" % (rc, shown, (": " + tail) if tail else ""), argv, rc, out, err)
    return CommandOutcome(changed=True, argv=argv, rc=rc, stdout=out, stderr=err, actions=["ran %s" % shown])
