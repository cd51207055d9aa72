"""ansible-lint, as `make lint` runs it (production profile, offline, no skip list), reported as a test.

It was a step of `make test` before pytest, a minute on the critical path. Here it starts in the
background when the session's collection is done (lab_harness.Background, from the conftest) and
overlaps the lab tests, which mostly wait on daemons; the test waits for its run and fails with
ansible-lint's output when it finds anything, so `make test` still fails on a lint finding.
"""

from __future__ import annotations

import os
import subprocess
from typing import List

import pytest
from lab_harness import REPO, VENV_BIN, Background

pytestmark = [pytest.mark.integration]

RUN = "ansible-lint"


def run_ansible_lint() -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"))
    return subprocess.run([str(VENV_BIN / "ansible-lint"), "--offline"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)


def start_in_background(items: List[pytest.Item]) -> None:
    """The conftest's collection hook: start the run now."""
    if items:
        Background.submit(RUN, run_ansible_lint)


def test_ansible_lint_finds_nothing():
    done = Background.result(RUN, run_ansible_lint)
    output = (done.stdout + done.stderr)[-12000:]
    assert done.returncode == 0, "ansible-lint --offline failed:\n%s" % output
    assert "Passed" in output and "0 failure(s), 0 warning(s)" in output, output
