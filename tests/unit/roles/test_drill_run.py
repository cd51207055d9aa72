"""The scheduled-drill runner's own logic: report retention, the outcome of a run, the host lock."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[3] / "roles" / "drill_schedule" / "files" / "drill_run.py"
spec = importlib.util.spec_from_file_location("drill_run", RUNNER)
drill_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(drill_run)


def write_drill(reports: Path, drill_id: str, mtime: float) -> None:
    for suffix in (".json", ".junit.xml", ".md", ".html", ".svg"):
        path = reports / ("drill-%s%s" % (drill_id, suffix))
        path.write_text("{}")
        os.utime(path, (mtime, mtime))


def test_prune_keeps_the_newest_drills_whole(tmp_path):
    for index, drill_id in enumerate(["d-1-aaaa", "d-2-bbbb", "d-3-cccc"]):
        write_drill(tmp_path, drill_id, 1000.0 + index)
    (tmp_path / "last-run.json").write_text("{}")
    deleted = drill_run.prune(str(tmp_path), keep=2)
    assert sorted(deleted) == sorted("drill-d-1-aaaa%s" % s for s in (".json", ".junit.xml", ".md", ".html", ".svg"))
    assert drill_run.drill_ids(str(tmp_path)) == ["d-2-bbbb", "d-3-cccc"]
    assert (tmp_path / "last-run.json").exists()
    assert drill_run.prune(str(tmp_path), keep=2) == []


def test_outcome_of_a_run():
    assert drill_run.status_of(0, "PLAY RECAP") == "passed"
    assert drill_run.status_of(2, "msg: 'drill refused, nothing was injected: exclusive: drill d-1 is active'") \
        == "refused"
    assert drill_run.status_of(2, "fatal: rollback failed") == "failed"


def test_a_held_lock_skips_the_run_without_touching_ansible(tmp_path):
    config = {"name": "t", "playbook": "/nonexistent/drill.yml", "run_dir": str(tmp_path / "run"),
              "reports_dir": str(tmp_path / "reports"), "lock": str(tmp_path / ".lock"), "extravars": {}}
    (tmp_path / "schedule.json").write_text(json.dumps(config))
    with open(tmp_path / ".lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert drill_run.main(["--config", str(tmp_path / "schedule.json")]) == 0
    record = json.loads((tmp_path / "reports" / "last-run.json").read_text())
    assert record["status"] == "skipped" and "another scheduled drill" in record["why"]
