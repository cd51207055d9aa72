# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's record of each replacement in force (<lab>/replacements/<retired>.json), which
one-click-slurm.yml reads so that a rerun keeps the spare in and the retired node out."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.spares import (
    forget_replacement,
    read_replacement_record,
    record_replacement,
    replacement_record_path,
)


def test_replacement_record_written_once_and_forgotten(tmp_path):
    lab = str(tmp_path)
    assert record_replacement(lab, "gpu-a-004", "gpu-a-005", "gpu-a", check_mode=True)
    assert read_replacement_record(lab, "gpu-a-004") is None, "check mode wrote"
    assert record_replacement(lab, "gpu-a-004", "gpu-a-005", "gpu-a")
    path = tmp_path / "replacements" / "gpu-a-004.json"
    assert replacement_record_path(lab, "gpu-a-004") == str(path)
    assert json.loads(path.read_text()) == {"retired": "gpu-a-004", "replacement": "gpu-a-005", "pool": "gpu-a"}
    assert not record_replacement(lab, "gpu-a-004", "gpu-a-005", "gpu-a")
    assert record_replacement(lab, "gpu-a-004", "gpu-a-006", "gpu-a"), "another spare is a new record"
    assert forget_replacement(lab, "gpu-a-004", check_mode=True) and path.exists()
    assert forget_replacement(lab, "gpu-a-004") and not path.exists()
    assert not forget_replacement(lab, "gpu-a-004")


def test_replacement_record_unreadable_is_written_again(tmp_path):
    path = tmp_path / "replacements" / "gpu-a-001.json"
    path.parent.mkdir()
    path.write_text("{torn")
    assert read_replacement_record(str(tmp_path), "gpu-a-001") is None
    assert record_replacement(str(tmp_path), "gpu-a-001", "gpu-a-005", "gpu-a")
    assert read_replacement_record(str(tmp_path), "gpu-a-001")["replacement"] == "gpu-a-005"
