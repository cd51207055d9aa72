"""Run the real playbooks on a copy of a shipped inventory (inventories/<name>), as a site would.

A site fills in the values its inventory marks REQUIRED; the tests do the same in a file of their
own that Ansible reads after the shipped ones (group_vars/all/ is read in name order).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict

import yaml
from lab_harness import REPO, VENV_BIN, PlaybookResult, run_playbook


def copy_inventory(tmp_path: Path, name: str, values: Dict[str, Any]) -> Path:
    """A copy of inventories/<name> with `values` set over the shipped ones."""
    copy = tmp_path / ("inventory-%d" % len(list(tmp_path.glob("inventory-*"))))
    shutil.copytree(REPO / "inventories" / name, copy)
    (copy / "group_vars" / "all" / "zz-site-filled-in.yml").write_text(yaml.safe_dump(values))
    return copy


def play(inventory_dir: Path, playbook: Path, *args: str) -> PlaybookResult:
    env = dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", HOME=str(inventory_dir))
    return run_playbook([str(playbook), "-i", str(inventory_dir), *args], env, timeout=300)
