"""slurm.fence: whose fence it is and what slurm_node writes, row by row; apply_node_state over a fake client."""

from __future__ import annotations

from typing import List, Optional

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import (
    SlurmCommandError,
    SlurmUnknownNodeError,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.fence import (
    KEPT_FOREIGN,
    NONE,
    SET,
    apply_node_state,
    fence_owner,
    plan_node_state,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.model import SlurmNode
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import CommandResult, SlurmRunner

OURS = "gpufleet: Xid79 GPU-fc522a91 (remediation r-1)"
OURS_NEW = "gpufleet: Xid79 GPU-fc522a91 (remediation r-2)"
HUMAN = "hardware check by alice"
SLINKY = "slurm-operator: node is cordoned"


def node(state="IDLE", flags=(), reason=None, name="gpu-a-001"):
    return SlurmNode(name=name, state=state, flags=tuple(flags), reason=reason)


# (id, current node, target, reason, force, action, write_state, after (state, flags, reason), foreign)
ROWS = [
    ("idle-drain", node(), "drain", OURS, False, SET, "DRAIN", ("IDLE", ("DRAIN",), OURS), False),
    ("busy-drain-is-draining", node("MIXED"), "drain", OURS, False, SET, "DRAIN", ("MIXED", ("DRAIN",), OURS), False),
    ("idle-down", node(), "down", OURS, False, SET, "DOWN", ("DOWN", (), OURS), False),
    ("idle-resume", node(), "resume", None, False, NONE, None, ("IDLE", (), None), False),
    ("idle-resume-force", node(), "resume", None, True, NONE, None, ("IDLE", (), None), False),
    ("unknown-state-drain", node("UNKNOWN"), "drain", OURS, False, SET, "DRAIN", ("UNKNOWN", ("DRAIN",), OURS), False),
    # Our own drain.
    ("our-drain-drain-same", node(flags=["DRAIN"], reason=OURS), "drain", OURS, False, NONE, None,
     ("IDLE", ("DRAIN",), OURS), False),
    ("our-drain-drain-other-reason", node(flags=["DRAIN"], reason=OURS), "drain", OURS_NEW, False, SET, "DRAIN",
     ("IDLE", ("DRAIN",), OURS_NEW), False),
    # slurmctld keeps DRAIN on a node it sets DOWN (measured on 22.05: DOWN+DRAIN).
    ("our-drain-down", node("ALLOCATED", ["DRAIN"], OURS), "down", OURS, False, SET, "DOWN",
     ("DOWN", ("DRAIN",), OURS), False),
    ("our-drain-resume", node(flags=["DRAIN"], reason=OURS), "resume", None, False, SET, "RESUME",
     ("IDLE", (), None), False),
    ("our-draining-resume-keeps-base", node("MIXED", ["DRAIN"], OURS), "resume", None, False, SET, "RESUME",
     ("MIXED", (), None), False),
    # Our own DOWN.
    ("our-down-down-same", node("DOWN", reason=OURS), "down", OURS, False, NONE, None, ("DOWN", (), OURS), False),
    ("our-down-down-other-reason", node("DOWN", reason=OURS), "down", OURS_NEW, False, SET, "DOWN",
     ("DOWN", (), OURS_NEW), False),
    ("our-down-drain-is-covered", node("DOWN", reason=OURS), "drain", OURS_NEW, False, NONE, None,
     ("DOWN", (), OURS), False),
    ("our-down-drain-resume", node("DOWN", ["DRAIN"], OURS), "resume", None, False, SET, "RESUME",
     ("IDLE", (), None), False),
    # Someone else's fence: a person's, Slinky's, slurmctld's own.
    ("human-drain-drain", node(flags=["DRAIN"], reason=HUMAN), "drain", OURS, False, KEPT_FOREIGN, None,
     ("IDLE", ("DRAIN",), HUMAN), True),
    ("human-drain-down", node(flags=["DRAIN"], reason=HUMAN), "down", OURS, False, KEPT_FOREIGN, None,
     ("IDLE", ("DRAIN",), HUMAN), True),
    ("human-drain-resume", node(flags=["DRAIN"], reason=HUMAN), "resume", None, False, KEPT_FOREIGN, None,
     ("IDLE", ("DRAIN",), HUMAN), True),
    ("human-drain-resume-force", node(flags=["DRAIN"], reason=HUMAN), "resume", None, True, SET, "RESUME",
     ("IDLE", (), None), True),
    ("human-drain-down-force-still-kept", node(flags=["DRAIN"], reason=HUMAN), "down", OURS, True, KEPT_FOREIGN,
     None, ("IDLE", ("DRAIN",), HUMAN), True),
    ("slinky-drain-drain", node(flags=["DRAIN"], reason=SLINKY), "drain", OURS, False, KEPT_FOREIGN, None,
     ("IDLE", ("DRAIN",), SLINKY), True),
    ("slinky-drain-down", node("MIXED", ["DRAIN"], SLINKY), "down", OURS, False, KEPT_FOREIGN, None,
     ("MIXED", ("DRAIN",), SLINKY), True),
    ("slinky-drain-resume", node(flags=["DRAIN"], reason=SLINKY), "resume", None, False, KEPT_FOREIGN, None,
     ("IDLE", ("DRAIN",), SLINKY), True),
    ("not-responding-down-drain", node("DOWN", ["NOT_RESPONDING"], "Not responding"), "drain", OURS, False,
     KEPT_FOREIGN, None, ("DOWN", ("NOT_RESPONDING",), "Not responding"), True),
    ("human-down-resume", node("DOWN", reason=HUMAN), "resume", None, False, KEPT_FOREIGN, None,
     ("DOWN", (), HUMAN), True),
    ("human-down-resume-force", node("DOWN", reason=HUMAN), "resume", None, True, SET, "RESUME",
     ("IDLE", (), None), True),
    ("failing-is-fenced", node("MIXED", ["FAIL"], HUMAN), "drain", OURS, False, KEPT_FOREIGN, None,
     ("MIXED", ("FAIL",), HUMAN), True),
    ("drain-without-reason-is-foreign", node(flags=["DRAIN"]), "down", OURS, False, KEPT_FOREIGN, None,
     ("IDLE", ("DRAIN",), None), True),
    # The exact reason we would write is ours even without the prefix: a rerun changes nothing.
    ("exact-reason-without-prefix", node(flags=["DRAIN"], reason="maintenance"), "drain", "maintenance", False,
     NONE, None, ("IDLE", ("DRAIN",), "maintenance"), False),
    # Flags that do not fence.
    ("reserved-is-not-fenced", node(flags=["RESERVED"]), "drain", OURS, False, SET, "DRAIN",
     ("IDLE", ("RESERVED", "DRAIN"), OURS), False),
]


@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_decision_row(row):
    _id, current, target, reason, force, action, write_state, after, foreign = row
    decision = plan_node_state(current, target, reason, force=force)
    assert decision.action == action, decision.message
    assert decision.changed == (action == SET)
    assert decision.write_state == write_state
    assert decision.write_reason == (reason if write_state in ("DRAIN", "DOWN") else None)
    assert (decision.after.state, decision.after.flags, decision.after.reason) == after
    assert decision.foreign_reason == (current.reason if foreign else None)
    assert decision.before.as_diff()["state"] == "+".join((current.state, *current.flags))
    assert current.name in decision.message
    if action == KEPT_FOREIGN:
        assert repr(current.reason) in decision.message and "someone else" in decision.message


def test_down_on_a_busy_node_and_the_diff_spelling():
    decision = plan_node_state(node("ALLOCATED"), "down", OURS)
    assert decision.before.as_diff() == {"state": "ALLOCATED", "reason": None}
    assert decision.after.as_diff() == {"state": "DOWN", "reason": OURS}
    assert plan_node_state(node("MIXED"), "drain", OURS).after.long_state == "draining"
    assert plan_node_state(node(), "drain", OURS).after.long_state == "drained"


def test_another_owner_prefix_makes_our_drains_foreign():
    current = node(flags=["DRAIN"], reason=OURS)
    assert fence_owner(current) == "ours"
    assert fence_owner(current, "site-x:") == "foreign"
    assert plan_node_state(current, "resume", owner_prefix="site-x:").action == KEPT_FOREIGN
    assert plan_node_state(node(flags=["DRAIN"], reason="site-x: fan"), "resume", owner_prefix="site-x:").changed
    assert fence_owner(node()) is None


def test_the_fast_fence_keeps_our_own_fence_and_its_reason():
    for current in (node(flags=["DRAIN"], reason=OURS), node("DOWN", reason=OURS)):
        decision = plan_node_state(current, "drain", OURS_NEW, update_reason=False)
        assert decision.action == NONE and decision.foreign_reason is None
    assert plan_node_state(node("DOWN", reason=OURS), "down", OURS_NEW, update_reason=False).action == NONE
    assert plan_node_state(node(), "drain", OURS_NEW, update_reason=False).write_state == "DRAIN"


@pytest.mark.parametrize("target", ["drain", "down", "resume"])
def test_a_future_spare_is_refused(target):
    with pytest.raises(FieldError, match="gpu-a-005 is a FUTURE node") as refused:
        plan_node_state(node("FUTURE", name="gpu-a-005"), target, OURS, force=True)
    assert refused.value.field == "name"


@pytest.mark.parametrize("target, reason, owner_prefix, field, message", [
    ("drain", None, "gpufleet:", "reason", "is required to drain"),
    ("down", "  ", "gpufleet:", "reason", "is required to down"),
    ("drain", "gpufleet: two\nlines", "gpufleet:", "reason", "one line"),
    ("down", "gpufleet: tab\there", "gpufleet:", "reason", "one line"),
    ("undrain", OURS, "gpufleet:", "state", "must be one of drain, down, resume"),
    (None, OURS, "gpufleet:", "state", "must be one of"),
    ("drain", OURS, "", "owner_prefix", "must not be empty"),
])
def test_bad_input_names_the_field(target, reason, owner_prefix, field, message):
    with pytest.raises(FieldError, match=message) as bad:
        plan_node_state(node(), target, reason, owner_prefix)
    assert bad.value.field == field


def test_resume_ignores_a_reason():
    decision = plan_node_state(node(flags=["DRAIN"], reason=OURS), "resume", "gpufleet: repaired")
    assert decision.write_state == "RESUME" and decision.write_reason is None


class FakeSlurm:
    """Our SlurmClient's node calls over an in-memory node; argv from the real runner."""

    def __init__(self, current: Optional[SlurmNode], check_mode: bool = False, fail_reread: bool = False):
        self.node = current
        self.runner = SlurmRunner(check_mode=check_mode)
        self.fail_reread = fail_reread
        self.calls: List[tuple] = []

    @property
    def check_mode(self):
        return self.runner.check_mode

    def nodes(self, names, future=False, with_jobs=True):
        self.calls.append(("nodes", tuple(names), future, with_jobs))
        if self.node is None or names != [self.node.name]:
            raise SlurmUnknownNodeError(["scontrol", "--future", "--oneliner", "show", "node"], names)
        if self.fail_reread and len([c for c in self.calls if c[0] == "nodes"]) > 1:
            raise SlurmCommandError(["scontrol", "show", "node"], 1, stderr="slurm_load_node error: Unable to contact")
        return {self.node.name: self.node}

    def set_node_state(self, name, state, reason=None):
        self.calls.append(("set", name, state, reason))
        argv = self.runner.argv("scontrol", "action node_name state reason", action=["update"], node_name=name,
                                state=state, reason=reason)
        if self.check_mode:
            return CommandResult(argv=argv, ran=False)
        flags = tuple(f for f in self.node.flags if f != "DRAIN")
        if state == "DRAIN":
            self.node = SlurmNode(self.node.name, self.node.state, (*flags, "DRAIN"), reason)
        elif state == "DOWN":
            self.node = SlurmNode(self.node.name, "DOWN", self.node.flags, reason)
        else:
            self.node = SlurmNode(self.node.name, "IDLE", (*flags, "NOT_RESPONDING"), None)
        return CommandResult(argv=argv, rc=0)


def test_apply_writes_reads_back_and_diffs():
    slurm = FakeSlurm(node())
    result = apply_node_state(slurm, "gpu-a-001", "drain", OURS)
    assert (result["changed"], result["action"], result["warnings"]) == (True, SET, [])
    assert result["command"] == ["scontrol", "update", "NodeName=gpu-a-001", "State=DRAIN", "Reason=" + OURS]
    assert result["node"] == {"name": "gpu-a-001", "state": "IDLE", "flags": ["DRAIN"], "long_state": "drained",
                              "reason": OURS}
    assert result["diff"] == {"before": {"state": "IDLE", "reason": None},
                              "after": {"state": "IDLE+DRAIN", "reason": OURS}}
    assert slurm.calls[0] == ("nodes", ("gpu-a-001",), True, False)
    again = apply_node_state(slurm, "gpu-a-001", "drain", OURS)
    assert (again["changed"], again["action"], again["command"]) == (False, NONE, [])


def test_apply_resume_shows_the_node_as_slurm_does_after():
    slurm = FakeSlurm(node("DOWN", ["DRAIN"], OURS))
    result = apply_node_state(slurm, "gpu-a-001", "resume")
    assert result["changed"] and result["command"] == ["scontrol", "update", "NodeName=gpu-a-001", "State=RESUME"]
    assert result["node"]["flags"] == ["NOT_RESPONDING"] and result["node"]["reason"] is None


def test_apply_in_check_mode_writes_nothing_and_predicts():
    slurm = FakeSlurm(node("MIXED"), check_mode=True)
    result = apply_node_state(slurm, "gpu-a-001", "down", OURS)
    assert result["changed"] and result["command"][3:] == ["State=DOWN", "Reason=" + OURS]
    assert slurm.node == node("MIXED")
    assert result["node"]["state"] == "DOWN" and result["diff"]["after"] == {"state": "DOWN", "reason": OURS}
    assert [call[0] for call in slurm.calls] == ["nodes", "set"]  # the fake's set wrote nothing in check mode


def test_apply_keeps_a_foreign_drain_with_a_warning():
    slurm = FakeSlurm(node(flags=["DRAIN"], reason=SLINKY))
    result = apply_node_state(slurm, "gpu-a-001", "down", OURS)
    assert (result["changed"], result["action"], result["foreign_reason"]) == (False, KEPT_FOREIGN, SLINKY)
    assert result["command"] == [] and [call[0] for call in slurm.calls] == ["nodes"]
    assert len(result["warnings"]) == 1 and SLINKY in result["warnings"][0]
    forced = apply_node_state(slurm, "gpu-a-001", "resume", force=True)
    assert forced["changed"] and forced["foreign_reason"] == SLINKY and "force" in forced["warnings"][0]


def test_apply_warns_when_the_read_back_fails():
    slurm = FakeSlurm(node(), fail_reread=True)
    result = apply_node_state(slurm, "gpu-a-001", "drain", OURS)
    assert result["changed"] and "reading the node back failed" in result["warnings"][0]
    assert result["node"]["flags"] == ["DRAIN"]  # the predicted node


def test_apply_unknown_node_is_a_typed_error_and_writes_nothing():
    slurm = FakeSlurm(node())
    with pytest.raises(SlurmUnknownNodeError) as unknown:
        apply_node_state(slurm, "gpu-z-999", "drain", OURS)
    assert unknown.value.nodes == ["gpu-z-999"] and "gpu-z-999" in str(unknown.value)
    assert [call[0] for call in slurm.calls] == ["nodes"]


@pytest.mark.parametrize("name, state, reason, field", [
    ("gpu-a-[001-002]", "drain", OURS, "name"),
    ("--all", "drain", OURS, "name"),
    ("gpu-a-001", "drain", None, "reason"),
    ("gpu-a-001", "undrain", OURS, "state"),
])
def test_apply_bad_input_asks_slurm_nothing(name, state, reason, field):
    slurm = FakeSlurm(node())
    with pytest.raises(FieldError) as bad:
        apply_node_state(slurm, name, state, reason)
    assert bad.value.field == field and slurm.calls == []
