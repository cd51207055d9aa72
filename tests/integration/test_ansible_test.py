"""ansible-test sanity and units (tools/ansible-test.sh), as CI runs them, reported as tests.

Sanity runs on what the collection ships (every top-level directory but tests/, and galaxy.yml): the
test code is linted by ruff and run by this session, and pylint on it was half of sanity's time.

They were `make sanity` and `make units`, run one after the other before pytest. Here they start
in the background when the session's collection is done (lab_harness.Background, from the
conftest) and overlap the unit and lab tests; each test waits for its run and fails with
ansible-test's output when the run fails, so `make test` still fails on either, and pytest's
summary line still closes the run. `make sanity` and `make units` still run one alone.

Here units runs one test module, tests/unit/plugins/modules/test_module_kube_timeouts.py: this
session runs every unit test itself with the same Python, so any set under ansible-test again proves
only that its harness and tests/unit/requirements.txt work, which one module proves as well. The whole
set would cost about 150 s of CPU on a 2-core machine, and tests/unit/plugins/modules alone (the
argument-spec property test of every module) 59 s, against 28 s for this one, all taken from the lab
tests. `make units` runs them all.
"""

from __future__ import annotations

import os
import subprocess
from typing import List

import pytest
from lab_harness import REPO, VENV_BIN, Background

pytestmark = [pytest.mark.integration]

COMMANDS = ["sanity", "units"]


def sanity_targets() -> List[str]:
    """Every tracked top-level directory but tests/, and galaxy.yml: what the collection ships. The test
    code is linted by ruff (make lint) and run by this session; pylint on it alone was half of sanity's
    time (163 of 260 s, idle machine), taken from the lab tests. A new top-level directory is in."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    folders = sorted({path.split("/", 1)[0] + "/" for path in tracked.splitlines() if "/" in path} - {"tests/"})
    return [*folders, "galaxy.yml"]


def targets(command: str) -> List[str]:
    """The targets of each command in this session (`make sanity` and `make units` run all)."""
    if command == "sanity":
        return sanity_targets()
    return ["tests/unit/plugins/modules/test_module_kube_timeouts.py"]


def run_ansible_test(command: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, VENV=str(VENV_BIN.parent), PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([str(REPO / "tools" / "ansible-test.sh"), command, *targets(command)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)


def start_in_background(items: List[pytest.Item]) -> None:
    """The conftest's collection hook: start the selected commands now."""
    selected = {item.callspec.params["command"] for item in items if hasattr(item, "callspec")}
    for command in COMMANDS:
        if command in selected:
            Background.submit("ansible-test:" + command, lambda c=command: run_ansible_test(c))


@pytest.mark.parametrize("command", COMMANDS)
def test_ansible_test(command):
    done = Background.result("ansible-test:" + command, lambda: run_ansible_test(command))
    output = (done.stdout + done.stderr)[-12000:]
    assert done.returncode == 0, "tools/ansible-test.sh %s failed:\n%s" % (command, output)
