"""Run the real playbooks on a copy of a shipped inventory (inventories/<name>), as a site would.

A site fills in the values its inventory marks REQUIRED; the tests do the same in a file of their
own that Ansible reads after the shipped ones (group_vars/all/ is read in name order).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, Tuple

import yaml
from lab_harness import REPO, VENV_BIN, PlaybookResult, case_hosts, run_cases, run_playbook


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


def play_cases(tmp_path: Path, name: str, values: Dict[str, Any], cases: Dict[str, Dict[str, Any]],
               playbook: Path, *args: str) -> Tuple[PlaybookResult, Dict[str, str]]:
    """Every case in one ansible-playbook run: each case is a host of the control group (a local
    connection) with its own overrides, so the validation play runs them side by side and each host
    stops at its own first refusal. Returns the run and, per case, its last task result as JSON text
    (Ansible's tree callback), which holds that refusal's message."""
    copy = copy_inventory(tmp_path, name, values)
    # The shipped groups as they are; the control group's one host becomes one host per case.
    hosts = yaml.safe_load((copy / "hosts.yml").read_text())
    hosts["all"]["children"]["control"]["hosts"] = case_hosts({case: {} for case in cases})
    (copy / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (copy / "host_vars").mkdir(exist_ok=True)
    for case, overrides in cases.items():
        (copy / "host_vars" / ("%s.yml" % case)).write_text(yaml.safe_dump(overrides))
    env = dict(os.environ, PATH=str(VENV_BIN) + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", HOME=str(copy))
    return run_cases([str(playbook), "-i", str(copy), *args], env, tmp_path / ("tree-%s" % copy.name), cases,
                     timeout=300)
