"""The phase order has one source: plans.PHASES. roles/remediation/tasks/phases.yml runs one block
per phase, in that order, each guarded by its own name and recording progress under that name only
(through remediation_progress, or the `progress` option of the module that does the phase).

A phase added to the policy but not to the playbook (or the other way round), two blocks swapped, or
a block that records another phase's progress would make a remediation skip or repeat an action on a
crash and rerun; this test fails on each."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, List

import yaml

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.plans import PHASES

PHASES_YML = Path(__file__).resolve().parents[3] / "roles" / "remediation" / "tasks" / "phases.yml"
GUARD = re.compile(r"^'([a-z_]+)' in remediation__todo$")
PROGRESS = "gpufleet.resilience.remediation_progress"
PHASE_IN_PROGRESS = re.compile(r"'phase': '([a-z_]+)'")


def tasks_in(block: List[Any], included: frozenset = frozenset()) -> Iterator[dict]:
    """Every task of the block, and of the files it includes (jobs_grace.yml includes itself: once)."""
    for task in block or ():
        yield task
        for part in ("block", "rescue", "always"):
            yield from tasks_in(task.get(part), included)
        name = task.get("ansible.builtin.include_tasks")
        if isinstance(name, str) and name not in included:
            yield from tasks_in(yaml.safe_load((PHASES_YML.parent / name).read_text()), included | {name})


def phase_blocks() -> List[tuple]:
    """(phase from the guard, the phases its progress calls record) per top-level task."""
    blocks = []
    for task in yaml.safe_load(PHASES_YML.read_text()):
        guard = GUARD.match(str(task.get("when", "")))
        assert guard, "a top-level task of phases.yml without a `'<phase>' in remediation__todo` guard: %r" % (
            task.get("name"))
        recorded = set()
        for inner in tasks_in(task.get("block")):
            for action, args in inner.items():
                if not action.startswith("gpufleet.resilience.") or not isinstance(args, dict):
                    continue
                if action == PROGRESS:
                    recorded.add(args["phase"])
                elif "progress" in args:
                    # remediation__progress | combine({'phase': '<phase>', ...}): the phase is a literal.
                    recorded.update(PHASE_IN_PROGRESS.findall(str(args["progress"])))
        blocks.append((guard.group(1), recorded))
    return blocks


def test_the_playbook_runs_every_phase_of_the_policy_in_its_order():
    assert [phase for phase, _recorded in phase_blocks()] == list(PHASES)


def test_each_phase_block_records_only_its_own_phase():
    for phase, recorded in phase_blocks():
        assert recorded <= {phase}, "the %s block records %s" % (phase, sorted(recorded))


def test_each_phase_block_records_its_phase():
    """A block that records nothing leaves its phase pending: a rerun would do it again."""
    for phase, recorded in phase_blocks():
        if phase != "record":  # remediation_record state=recorded closes the remediation itself
            assert recorded == {phase}, "the %s block records %s" % (phase, sorted(recorded))
