# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The optional fast fence: drain this node's Slurm node the moment its verdict turns fatal.

The remediation loop takes seconds to minutes (alert, rulebook, playbook). The fence closes that
gap for new work only: the node is set DRAIN - running jobs keep running until remediation
signals them - with a reason starting ``gpufleet:`` and without Slinky's ``slurm-operator:``
prefix, so the operator leaves it alone.

* It never resumes a node; putting a node back is remediation's decision, after a repair.
* A node already DRAIN or DOWN keeps its state and its reason (somebody, maybe a human, set it);
  ``slurm.fence.plan_node_state`` decides, the same code as the slurm_node module.
* It fences once per fatal episode; a failure (Slurm down) is retried with a capped backoff until
  it succeeds or the verdict is no longer fatal.
* ``scontrol`` runs in the fence's own thread: a hung controller never stalls sensing.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.connect import slurm_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.fence import OWNER_PREFIX, plan_node_state

LOG = logging.getLogger("gpufleet.agent.fence")
REASON_PREFIX = OWNER_PREFIX
SCONTROL_TIMEOUT = 5.0
BACKOFF_MAX = 30.0


def fence_reason(condition_reason: str, message: str) -> str:
    """``gpufleet: Xid79 GPU 3 (GPU-..., 0000:3b:00.0) (agent fast fence)`` - one short line."""
    message = message.split("\n", 1)[0]  # the people's line; the data line is for machines
    head = message.split(": ", 1)[1] if ": " in message else message
    head = head.split(";", 1)[0].split(": XID", 1)[0].split(": SXID", 1)[0]
    text = "%s %s %s (agent fast fence)" % (REASON_PREFIX, condition_reason, head.strip())
    return " ".join(text.split())[:200]


def fence_client(params: Mapping[str, Any]) -> Any:
    """The Slurm client of the fence's settings (scontrol or slurmrestd), with the fence's short timeout."""
    return slurm_client(dict(params, timeout=SCONTROL_TIMEOUT))


class FastFence:
    def __init__(self, node: str, client_factory: Callable[[], Any], on_error: Callable[[str], None],
                 on_fenced: Callable[[str, str], None]) -> None:
        self.node = node
        self.client_factory = client_factory
        self.on_error = on_error
        self.on_fenced = on_fenced
        self._wanted: Optional[str] = None  # the reason while fatal, None otherwise
        self._done = False
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="fast-fence", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        self._thread.join(timeout)

    def update(self, fatal: bool, reason: str) -> None:
        """Called by the loop on every verdict; cheap and non-blocking."""
        with self._wake:
            if not fatal:
                self._wanted, self._done = None, False  # a new fatal episode fences again
                return
            if self._wanted is None and not self._done:
                self._wanted = reason
                self._wake.notify()

    def _run(self) -> None:
        backoff = 0.0
        while True:
            with self._wake:
                while not self._stop and (self._wanted is None or self._done):
                    self._wake.wait()
                if self._stop:
                    return
                reason = self._wanted
            try:
                outcome = self._fence(reason)
                with self._wake:
                    if self._wanted == reason:
                        self._done = True
                self.on_fenced(outcome, reason)
                backoff = 0.0
            except Exception as exc:  # SlurmError, a missing scontrol, a timeout
                self.on_error("fast fence of %s: %s" % (self.node, exc))
                backoff = min(BACKOFF_MAX, max(0.5, backoff * 2))
                with self._wake:
                    if not self._stop:
                        self._wake.wait(backoff)

    def _fence(self, reason: str) -> str:
        client = self.client_factory()
        started = time.monotonic()
        node = client.nodes([self.node], with_jobs=False)[self.node]
        # The shared decision (slurm.fence) says whose fence it is; the fast fence never rewrites a
        # fence, not even ours: the remediation's reason names its run.
        decision = plan_node_state(node, "drain", reason, REASON_PREFIX, update_reason=False)
        if not decision.changed:
            LOG.info("fast fence: %s is already %s (%s, %s); left as it is", self.node, node.long_state,
                     "someone else's" if decision.foreign_reason is not None else "ours", node.reason)
            return "kept:%s" % node.long_state
        client.set_node_state(self.node, decision.write_state, decision.write_reason)
        LOG.info("fast fence: drained %s in %.3fs: %s", self.node, time.monotonic() - started, reason)
        return "drained"
