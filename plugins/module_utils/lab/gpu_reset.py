# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A GPU reset in the lab: what ``nvidia-smi -r -i N`` does to a real node, done to a simulated one.

The fake GPUs' state goes back to healthy (the volatile ECC counters, a lost GPU and pending XID
events are cleared, as a reset clears them), and the node's health agent is told with SIGUSR1 to
forget its XID history - otherwise the XID that caused the reset would keep the node fatal for
the agent's whole window. The agent is found by its recorded PID (``<lab>/run``), never by name.

``reset_by_command`` is the other backend (a site's ``ssh <node> nvidia-smi -r``), then the site's
``agent_command`` that tells the node's agent the same (``systemctl kill -s USR1 gpufleet-agent.service``
over ssh, or a ``kubectl exec`` into the DaemonSet pod): the agent keeps its faults across restarts,
so without it a reset node stays fatal until the agent's window passes. The node must be a node
name before it fills ``{node}`` - an absolute path or ``-oProxyCommand=...`` would make ssh run
something else entirely. Each command runs without a shell, under a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Dict, List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int, check_node_name, check_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.process import is_alive, read_record

MAX_GPU = 31


def check_target(node: Any, gpu: Any) -> Optional[int]:
    """The node and the GPU index, through the strict layer, before anything runs."""
    check_node_name(node, "node")
    return None if gpu is None else check_int(gpu, "gpu", 0, MAX_GPU)


class CommandFailed(GpufleetError):
    """A site command that failed, timed out or could not start; ``rc`` is None for the last two."""

    def __init__(self, message: str, rc: Optional[int] = None) -> None:
        super().__init__(message)
        self.rc = rc


def reset_argv(command: Any, node: str, gpu: Any, field: str = "command") -> List[str]:
    """The site's command with ``{node}`` and ``{gpu}`` filled in (GPU 0 when none is given)."""
    index = check_target(node, gpu)
    if not isinstance(command, (list, tuple)) or not command:
        raise FieldError(field, "is required with backend=command, e.g. [ssh, '{node}', nvidia-smi, -r]")
    words = [check_text(word, "%s[%d]" % (field, i)) for i, word in enumerate(command)]
    number = "0" if index is None else str(index)
    return [word.replace("{node}", node).replace("{gpu}", number) for word in words]


def reset_by_command(command: Any, agent_command: Any, node: str, gpu: Any, timeout: Any,
                     check_mode: bool = False) -> Dict[str, Any]:
    """Run the reset command, then the agent command (both checked before either runs)."""
    argv = reset_argv(command, node, gpu)
    tell = reset_argv(agent_command, node, gpu, "agent_command") if agent_command else None
    seconds = check_int(timeout, "timeout", 1, 3600)
    runs = [("the GPU reset command", argv)] + ([("the agent command", tell)] if tell else [])
    result: Dict[str, Any] = dict(changed=True, actions=[], agent_told=bool(tell), warnings=[])
    if not tell:
        result["warnings"].append(
            "agent_command is empty: the health agent of %s was not told of the reset, so it reports the node "
            "fatal until its XID window passes (set agent_command, e.g. [ssh, '{node}', sudo, systemctl, kill, "
            "-s, USR1, gpufleet-agent.service])" % node)
    for what, words in runs:
        if check_mode:
            result["actions"].append("would run: %s" % " ".join(words))
            continue
        try:
            done = subprocess.run(words, capture_output=True, text=True, timeout=seconds, check=False)
        except subprocess.TimeoutExpired:
            raise CommandFailed("%s did not finish within %ds: %s" % (what, seconds, " ".join(words))) from None
        except OSError as exc:
            raise CommandFailed("%s could not start: %s" % (what, exc)) from None
        if done.returncode != 0:
            raise CommandFailed("%s failed (rc %d): %s" % (
                what, done.returncode, (done.stderr or done.stdout or "").strip()[-2000:]), rc=done.returncode)
        result["actions"].append("ran: %s" % " ".join(words))
    return result


def reset_lab_gpu(lab_dir: str, node: str, gpu: Any, check_mode: bool = False) -> Dict[str, Any]:
    check_target(node, gpu)
    if not isinstance(lab_dir, str) or not lab_dir:
        raise FieldError("lab_dir", "is required with backend=lab: the lab directory (gpufleet_lab_dir)")
    state_dir = os.path.join(lab_dir, "gpus", node)
    if not os.path.isdir(state_dir):
        raise FieldError("node", "%s has no simulated GPUs in %s" % (node, state_dir))
    actions: List[str] = []
    actions.append("reset the simulated GPU%s of %s" % ("" if gpu is None else " %s" % gpu, node))
    agent = live_agent(lab_dir, node)
    if agent is not None:
        actions.append("SIGUSR1 to health agent PID %d (forget the XID history)" % agent.pid)
    if not check_mode:
        fake_gpu_state.clear(state_dir)
        forget_xids(lab_dir, node)
    return {"changed": True, "actions": actions, "agent_told": agent is not None}


def live_agent(lab_dir: str, node: str) -> Any:
    """The node's lab health agent's process record, when it runs (found by recorded PID, never by name)."""
    record = read_record(os.path.join(lab_dir, "run"), "health-agent-%s" % node)
    return record if record is not None and is_alive(record) else None


def forget_xids(lab_dir: str, node: str) -> bool:
    """SIGUSR1 to the node's lab agent: it forgets its XID history. False when no agent runs."""
    agent = live_agent(lab_dir, node)
    if agent is None:
        return False
    os.kill(agent.pid, signal.SIGUSR1)
    return True
