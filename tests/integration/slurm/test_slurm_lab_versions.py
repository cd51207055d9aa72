"""A lab directory keeps the Slurm version it was made with: asking the slurm role for another is
refused before anything changes (its slurmctld state is that version's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_harness import run_playbook
from slurm_clusters import SlurmCluster

pytestmark = [pytest.mark.integration]

UP = Path(__file__).resolve().parent / "files" / "slurm-lab-up.yml"


def test_another_version_in_a_lab_directory_is_refused_naming_the_variable(slurm_lab):
    before = slurm_lab.recorded_pids()
    variables = dict(slurm_lab.extra_vars, gpufleet_lab_dir=str(slurm_lab.lab_dir), slurm_lab_version="22.05")
    refused = run_playbook([str(UP), "-e", json.dumps(variables)], slurm_lab.env())
    assert refused.rc != 0
    text = " ".join(refused.output.split())
    assert "slurm_lab_version: %s runs Slurm 26.05, not 22.05" % slurm_lab.lab_dir in text, refused.output[-3000:]
    assert refused.changed == 0 and slurm_lab.recorded_pids() == before
    assert (slurm_lab.lab_dir / "slurm" / "lab-version").read_text() == "26.05\n"
    assert str(SlurmCluster(lab=slurm_lab, version="26.05").client().version()).startswith("26.05.")
