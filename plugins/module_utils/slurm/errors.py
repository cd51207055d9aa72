# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Typed errors of the Slurm client.

A command error carries what an operator needs to reproduce it by hand: the argv
(shell-quoted in the message), the exit status and stderr. The module turns
``details()`` into ``fail_json`` keys; nothing below the module calls ``fail_json``.

Pure: no I/O (the parsers raise ``SlurmParseError`` from here too).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Dict, List, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import GpufleetError

# What scontrol says when an update names a node slurmctld does not know, in 22.05 and 24.11
# (captured in data/slurm-captures/*/scontrol_update_unknown_node.txt), and what `scontrol
# show node X` says for one.
_UNKNOWN_NODE = re.compile(r"Invalid node name specified|Node \S+ not found", re.I)


class SlurmError(GpufleetError):
    """Base of every Slurm client error."""

    def details(self) -> Dict[str, Any]:
        """Extra result keys for ``fail_json``."""
        return {}


class SlurmParseError(SlurmError):
    """Slurm printed something the parser cannot read; ``excerpt`` shows where."""

    def __init__(self, what: str, message: str, excerpt: str = "") -> None:
        super().__init__("cannot parse %s: %s%s" % (what, message, (": %r" % excerpt[:200]) if excerpt else ""))
        self.what = what
        self.excerpt = excerpt


class SlurmCommandError(SlurmError):
    """A Slurm command failed: non-zero exit, could not start, or timed out (``rc`` is then None)."""

    def __init__(self, argv: Sequence[str], rc: Optional[int], stderr: str = "", stdout: str = "",
                 message: Optional[str] = None) -> None:
        self.argv: List[str] = list(argv)
        self.rc = rc
        self.stderr = stderr
        self.stdout = stdout
        if message is None:
            message = "%s failed (rc %s): %s" % (
                shlex.join(self.argv), rc, (stderr or stdout).strip() or "no output")
        super().__init__(message)

    def details(self) -> Dict[str, Any]:
        return dict(cmd=self.argv, rc=self.rc, stderr=self.stderr, stdout=self.stdout)


class SlurmTimeoutError(SlurmCommandError):
    """The command ran longer than the runner's timeout and was killed."""

    def __init__(self, argv: Sequence[str], timeout: Optional[float], stderr: str = "") -> None:
        super().__init__(argv, None, stderr=stderr,
                         message="%s timed out after %ss" % (shlex.join(list(argv)), timeout))
        self.timeout = timeout

    def details(self) -> Dict[str, Any]:
        return dict(super().details(), timeout=self.timeout)


class SlurmUnknownNodeError(SlurmCommandError):
    """Slurm does not know the node(s) ``nodes`` (or hides them: FUTURE nodes need ``future``)."""

    def __init__(self, argv: Sequence[str], nodes: Sequence[str], rc: Optional[int] = None, stderr: str = "",
                 stdout: str = "", hint: str = "") -> None:
        self.nodes = list(nodes)
        message = "Slurm does not know node(s) %s%s (%s)" % (
            ", ".join(self.nodes) or "?", hint, (stderr.strip() or shlex.join(list(argv))))
        super().__init__(argv, rc, stderr=stderr, stdout=stdout, message=message)

    def details(self) -> Dict[str, Any]:
        return dict(super().details(), nodes=self.nodes)


def command_error(argv: Sequence[str], rc: Optional[int], stdout: str, stderr: str,
                  nodes: Sequence[str] = ()) -> SlurmCommandError:
    """The most specific error for a failed command; ``nodes`` are the node names it was about."""
    if _UNKNOWN_NODE.search(stderr or ""):
        return SlurmUnknownNodeError(argv, nodes, rc=rc, stderr=stderr, stdout=stdout)
    return SlurmCommandError(argv, rc, stderr=stderr, stdout=stdout)
