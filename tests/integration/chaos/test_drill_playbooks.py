"""The drill playbooks that need no lab: every per-experiment playbook parses and names its
experiment, and drill-history.yml finds a time-to-recover regression in real drill documents."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from lab_harness import REPO, VENV_BIN, run_playbook

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import experiments

pytestmark = [pytest.mark.integration]

SAMPLE = REPO / "docs" / "chaos-sample-drill.json"


def env():
    found = dict(os.environ)
    found.update(PATH=str(VENV_BIN) + os.pathsep + found.get("PATH", ""), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
                 ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1", LC_ALL="C.UTF-8")
    return found


def test_there_is_one_playbook_per_experiment_and_each_parses():
    playbooks = sorted(p.stem for p in (REPO / "playbooks" / "drills").glob("*.yml"))
    assert playbooks == experiments.names()
    for name in playbooks:
        path = REPO / "playbooks" / "drills" / ("%s.yml" % name)
        assert "experiment: %s\n" % name in path.read_text()
        checked = run_playbook(["--syntax-check", str(path)], env(), timeout=120)
        assert checked.rc == 0, checked.output[-2000:]


def write_drills(directory: Path, recover_times):
    base = json.loads(SAMPLE.read_text())
    for index, seconds in enumerate(recover_times):
        doc = copy.deepcopy(base)
        doc["id"] = "d-20261201-0000%02d-abcd" % index
        doc["started_at"] = base["started_at"] + 3600 * index
        doc["finished_at"] = doc["started_at"] + 60
        doc["metrics"]["time_to_recover_s"] = seconds
        (directory / ("drill-%s.json" % doc["id"])).write_text(json.dumps(doc))


@pytest.mark.parametrize("times, regressed", [([20.0, 21.0, 19.5, 20.5], False), ([20.0, 21.0, 19.5, 31.0], True)])
def test_drill_history_flags_a_time_to_recover_regression(tmp_path, times, regressed):
    write_drills(tmp_path, times)
    variables = {"chaos_drill_experiment": "gpu_xid", "chaos_drill_report_dir": str(tmp_path),
                 "chaos_drill_history_fail_on_regression": True}
    result = run_playbook(["playbooks/drill-history.yml", "-e", json.dumps(variables)], env(), timeout=120)
    assert (result.rc != 0) == regressed, result.output[-3000:]
    assert ("regress" in result.output.lower()) or not regressed
