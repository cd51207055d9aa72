# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Issue 16, finding 8: drill.yml forwards only the experiment's declared knobs (filter drill_params);
an inventory variable that happens to be called path, mode or output never reaches a drill.

Beside the schema's tests (tests/unit/plugins/module_utils/chaos/test_params_schema.py): filters
import ansible.errors, which ansible-test's module_utils unit tests do not have."""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.gpufleet.resilience.plugins.filter.drill_params import drill_params

REPO = Path(__file__).resolve().parents[4]


def test_drill_yml_forwards_only_the_experiments_knobs() -> None:
    inventory = {"xid": 79, "path": "/etc/passwd", "mode": "0777", "output": "/tmp/x", "gpu": 2}
    assert drill_params(inventory, "gpu_xid") == {"xid": 79, "gpu": 2}
    assert drill_params(inventory, "checkpoint_storage") == {"path": "/etc/passwd", "mode": "0777"}
    assert drill_params(inventory, "no_such_experiment") == {}


def test_drill_yml_uses_the_filter() -> None:
    play = yaml.safe_load((REPO / "playbooks" / "drill.yml").read_text())[0]
    assert "gpufleet.resilience.drill_params(" in play["roles"][0]["vars"]["chaos_drill_params"]
