# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 10: a lab directory created beforehand by another user kept its owner.

The kubernetes role's first lab task (lab_files with owned_by_runner), run for real (ansible-playbook)
on directories made here."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from lab_harness import REPO, VENV_BIN, run_playbook

pytestmark = pytest.mark.integration

NOBODY = 65534


def check(tmp_path: Path, lab_dir: Path):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "gpufleet.resilience.kubernetes", "tasks_from": "lab_dirs"}}]}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    env = dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_NOCOLOR="1")
    return run_playbook([str(playbook), "-e", json.dumps({"kubernetes_lab_dir": str(lab_dir)})], env, timeout=120)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user owns needs root")
def test_a_lab_directory_of_another_user_is_refused_naming_it(tmp_path) -> None:
    lab = tmp_path / "lab"
    lab.mkdir()
    os.chown(lab, NOBODY, NOBODY)
    result = check(tmp_path, lab)
    assert result.rc != 0
    said = " ".join(result.output.split())
    assert "kubernetes_lab_dir %s already exists and is owned by uid %d" % (lab, NOBODY) in said, said[-2000:]


def test_a_symlink_is_refused_and_our_own_directory_or_none_passes(tmp_path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "lab-link"
    link.symlink_to(elsewhere)
    refused = check(tmp_path, link)
    assert refused.rc != 0 and "is a symlink" in " ".join(refused.output.split())
    assert check(tmp_path, elsewhere).rc == 0
    assert check(tmp_path, tmp_path / "not-yet").rc == 0
