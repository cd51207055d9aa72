# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Whose fence is it, and what to write: the one decision behind slurm_node and the agent's fast fence.

A node is *fenced* when Slurm starts no new work on it: base state ``DOWN``, or the flag ``DRAIN``
(``drained`` when idle, ``draining`` while jobs run) or ``FAIL``. Slurm 22.05 and 24.11 both keep
a drain as a flag on the base state (``IDLE+DRAIN``), never as a state of its own.

A fence is *ours* when its reason starts with the owner prefix (``gpufleet:``), or is exactly the
reason we were asked to write. Anything else is someone else's: a human's note, slurmctld's own
``Not responding``, or Slinky's ``slurm-operator:`` drain (which an uncordon lifts). Someone
else's fence is never overwritten and never resumed unless forced; it is kept and reported.

| current                  | drain                        | down                       | resume          |
|--------------------------|------------------------------|----------------------------|-----------------|
| not fenced               | set DRAIN                    | set DOWN                   | none            |
| our DRAIN, same reason   | none                         | set DOWN                   | set RESUME      |
| our DRAIN, other reason  | set DRAIN (new reason)       | set DOWN                   | set RESUME      |
| our DOWN, same reason    | none                         | none                       | set RESUME      |
| our DOWN, other reason   | none (DOWN covers a drain)   | set DOWN (new reason)      | set RESUME      |
| someone else's fence     | kept_foreign                 | kept_foreign               | kept_foreign,   |
|                          |                              |                            | set when forced |
| FUTURE (a spare)         | FieldError                   | FieldError                 | FieldError      |

``update_reason=False`` (the agent's fast fence) keeps our own fence's reason too: the reason the
remediation wrote names its run.

The decision is pure; ``apply_node_state`` reads the node, decides, writes and reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import MAX_REASON, check_node
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmNode, long_state

OWNER_PREFIX = "gpufleet:"
# Slinky's slurm-operator drains with this prefix and undrains what carries it.
SLINKY_PREFIX = "slurm-operator:"
TARGETS = ("drain", "down", "resume")
FENCE_FLAGS = ("DRAIN", "FAIL")

SET = "set"
KEPT_FOREIGN = "kept_foreign"
NONE = "none"


def fenced(node: SlurmNode) -> bool:
    """Slurm starts no new work on the node: DOWN, or drained, draining or failing."""
    return node.state == "DOWN" or any(flag in node.flags for flag in FENCE_FLAGS)


def reason_is_ours(reason: Optional[str], owner_prefix: str = OWNER_PREFIX, wanted: Optional[str] = None) -> bool:
    """Our reason: it starts with ``owner_prefix``, or it is exactly ``wanted`` (what we would write)."""
    if not reason:
        return False
    return reason.startswith(owner_prefix) or (wanted is not None and reason == wanted)


def fence_owner(node: SlurmNode, owner_prefix: str = OWNER_PREFIX, wanted: Optional[str] = None) -> Optional[str]:
    """None when the node is not fenced; else ``"ours"`` or ``"foreign"``."""
    if not fenced(node):
        return None
    return "ours" if reason_is_ours(node.reason, owner_prefix, wanted) else "foreign"


@dataclass(frozen=True)
class NodeView:
    """What the module shows of a node: base state, flags, reason."""

    name: str
    state: str
    flags: Tuple[str, ...] = ()
    reason: Optional[str] = None

    @classmethod
    def of(cls, node: SlurmNode) -> "NodeView":
        return cls(name=node.name, state=node.state, flags=tuple(node.flags), reason=node.reason)

    @property
    def long_state(self) -> str:
        return long_state(self.state, self.flags)

    def as_dict(self) -> Dict[str, Any]:
        return dict(name=self.name, state=self.state, flags=list(self.flags), long_state=self.long_state,
                    reason=self.reason)

    def as_diff(self) -> Dict[str, Any]:
        """``{state: 'IDLE+DRAIN', reason: ...}``: scontrol's spelling, one line per side."""
        return dict(state="+".join((self.state, *self.flags)), reason=self.reason)


@dataclass(frozen=True)
class NodeStateDecision:
    """What to do to one node, and why. ``write_state`` is scontrol's State= (None: no write)."""

    action: str  # SET, KEPT_FOREIGN or NONE
    target: str  # drain, down or resume
    before: NodeView
    after: NodeView  # as Slurm will show it; after a write the module reads it back instead
    write_state: Optional[str] = None
    write_reason: Optional[str] = None
    foreign_reason: Optional[str] = None
    message: str = ""

    @property
    def changed(self) -> bool:
        return self.action == SET


def check_request(state: Any, reason: Optional[str], owner_prefix: str) -> str:
    """The target, lower case; bad input is a FieldError naming the option."""
    target = str(state or "").lower()
    if target not in TARGETS:
        raise FieldError("state", "must be one of %s, not %r" % (", ".join(TARGETS), state))
    if not owner_prefix or not owner_prefix.strip():
        raise FieldError("owner_prefix", "must not be empty: every fence would count as ours")
    check_text(owner_prefix, "owner_prefix", 128)
    if target != "resume":
        if reason is None or not str(reason).strip():
            raise FieldError("reason", "is required to %s a node" % target)
        check_text(reason, "reason", MAX_REASON)
    return target


def plan_node_state(current: SlurmNode, state: str, reason: Optional[str] = None,
                    owner_prefix: str = OWNER_PREFIX, force: bool = False,
                    update_reason: bool = True) -> NodeStateDecision:
    """The decision for ``current`` asked to be ``state`` (drain, down, resume); see the table above.

    ``reason`` is what a drain or down writes (unused by resume). ``force`` resumes someone else's
    fence. ``update_reason=False`` keeps the reason of our own fence when it already covers the
    target.
    """
    target = check_request(state, reason, owner_prefix)
    if current.state == "FUTURE":
        raise FieldError("name", "%s is a FUTURE node (a spare Slurm hides until its slurmd starts): bring it "
                                 "into service before you %s it" % (current.name, target))
    before = NodeView.of(current)
    wanted = reason if target != "resume" else None
    owner = fence_owner(current, owner_prefix, wanted)

    def decide(action: str, message: str, write_state: Optional[str] = None, after: Optional[NodeView] = None,
               foreign: bool = False) -> NodeStateDecision:
        return NodeStateDecision(
            action=action, target=target, before=before, after=after or before, write_state=write_state,
            write_reason=wanted if write_state in ("DRAIN", "DOWN") else None,
            foreign_reason=current.reason if foreign else None, message=message)

    if owner == "foreign" and not (target == "resume" and force):
        verb = "resumed" if target == "resume" else "overwritten"
        return decide(KEPT_FOREIGN, "%s is %s by someone else (reason %r); kept, not %s" % (
            current.name, before.long_state, current.reason, verb), foreign=True)

    if target == "resume":
        if owner is None:
            return decide(NONE, "%s is not drained or down; nothing to resume" % current.name)
        flags = tuple(flag for flag in current.flags if flag not in FENCE_FLAGS)
        after = replace(before, state="IDLE" if current.state == "DOWN" else current.state, flags=flags, reason=None)
        if owner == "foreign":
            return decide(SET, "%s is %s by someone else (reason %r); resumed because force is set" % (
                current.name, before.long_state, current.reason), "RESUME", after, foreign=True)
        return decide(SET, "%s resumed (was %s: %s)" % (current.name, before.long_state, current.reason),
                      "RESUME", after)

    if target == "drain":
        if owner is not None and (current.state == "DOWN" or current.reason == reason or not update_reason):
            return decide(NONE, "%s is already %s (%s)" % (current.name, before.long_state, current.reason))
        flags = current.flags + (() if "DRAIN" in current.flags else ("DRAIN",))
        return decide(SET, "%s drained: %s" % (current.name, reason), "DRAIN",
                      replace(before, flags=flags, reason=reason))

    # down
    if current.state == "DOWN" and (current.reason == reason or not update_reason):
        return decide(NONE, "%s is already down (%s)" % (current.name, current.reason))
    # slurmctld keeps the DRAIN flag of a node it sets DOWN (sinfo then says "drained").
    return decide(SET, "%s set down: %s" % (current.name, reason), "DOWN",
                  replace(before, state="DOWN", reason=reason))


def apply_node_state(client: Any, name: str, state: str, reason: Optional[str] = None,
                     owner_prefix: str = OWNER_PREFIX, force: bool = False) -> Dict[str, Any]:
    """Read the node, decide, write (unless the client is in check mode), read it back.

    Returns the module's result: changed, action, node, foreign_reason, command, message, plus
    ``diff`` (before/after) and ``warnings`` for the module to pass on. Bad input fails before
    Slurm is asked anything.
    """
    check_node(name, "name")
    check_request(state, reason, owner_prefix)
    current = client.nodes([name], future=True, with_jobs=False)[name]
    decision = plan_node_state(current, state, reason, owner_prefix, force)
    warnings: List[str] = []
    command: List[str] = []
    after = decision.after
    if decision.changed:
        result = client.set_node_state(name, decision.write_state, decision.write_reason)
        command = list(result.argv)
        if result.ran:
            try:
                after = NodeView.of(client.nodes([name], future=True, with_jobs=False)[name])
            except SlurmError as exc:
                warnings.append("%s: the write ran, but reading the node back failed: %s" % (name, exc))
    if decision.foreign_reason is not None:
        warnings.append(decision.message)
    return dict(
        changed=decision.changed, action=decision.action, node=after.as_dict(), gpus=current.gpus,
        foreign_reason=decision.foreign_reason, command=command, message=decision.message,
        diff=dict(before=decision.before.as_diff(), after=after.as_diff()), warnings=warnings,
    )
