# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""drill_report and drill_history as Ansible runs them: arguments in, one JSON result out.

The idempotency ladder (check -> nothing written -> write -> check unchanged -> write unchanged), a bad
document failing with its field, and drill_history's fail_on_regression.
"""

from __future__ import annotations

import copy
import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.gpufleet.resilience.plugins.modules import drill_history, drill_report


def run(monkeypatch, capsys, module, args, check=False):
    args = dict(args, _ansible_check_mode=check)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as done:
        module.main()
    result = json.loads(capsys.readouterr().out)
    assert (done.value.code != 0) == bool(result.get("failed"))
    return result


def test_drill_report_idempotency_ladder(monkeypatch, capsys, tmp_path, passed):
    dest = tmp_path / "drills"
    args = {"drill": passed, "dest": str(dest)}
    planned = run(monkeypatch, capsys, drill_report, args, check=True)
    assert planned["changed"] and len(planned["changed_files"]) == 5
    assert not dest.exists()
    written = run(monkeypatch, capsys, drill_report, args)
    assert written["changed"] and sorted(written["changed_files"]) == sorted(written["files"].values())
    assert written["summary"].startswith("drill d-20261130-195000-ab12 gpu_xid on gpu-a-003: passed;")
    assert len(list(dest.iterdir())) == 5
    assert not run(monkeypatch, capsys, drill_report, args, check=True)["changed"]
    assert not run(monkeypatch, capsys, drill_report, args)["changed"]


def test_drill_report_formats(monkeypatch, capsys, tmp_path, passed):
    result = run(monkeypatch, capsys, drill_report, {"drill": passed, "dest": str(tmp_path), "formats": ["junit"]})
    assert list(result["files"]) == ["junit"] and result["files"]["junit"].endswith(".junit.xml")
    bad = run(monkeypatch, capsys, drill_report, {"drill": passed, "dest": str(tmp_path), "formats": ["pdf"]})
    assert bad["failed"] and "pdf" in bad["msg"]


def test_drill_report_names_the_bad_field(monkeypatch, capsys, tmp_path, passed):
    passed["steps"][1]["verdict"] = "green"
    result = run(monkeypatch, capsys, drill_report, {"drill": passed, "dest": str(tmp_path / "x")})
    assert result["failed"] and result["field"] == "steps[1].verdict"
    assert result["msg"].startswith("steps[1].verdict: is 'green'")
    assert not (tmp_path / "x").exists()


def test_drill_history_reports_and_can_fail_on_a_regression(monkeypatch, capsys, tmp_path, passed):
    for number, recover in enumerate((44.0, 46.0, 45.0, 80.0)):
        doc = copy.deepcopy(passed)
        doc.update(id="d-%d" % number, started_at=passed["started_at"] + number * 86400)
        doc["metrics"]["time_to_recover_s"] = recover
        run(monkeypatch, capsys, drill_report, {"drill": doc, "dest": str(tmp_path), "formats": ["json"]})
    args = {"dest": str(tmp_path), "experiment": "gpu_xid"}
    result = run(monkeypatch, capsys, drill_history, args, check=True)
    assert not result["changed"] and result["regressed"] and len(result["drills"]) == 4
    assert "80.0 s" in result["why"] and result["figures"]["median_s"] == 45.0
    failed = run(monkeypatch, capsys, drill_history, dict(args, fail_on_regression=True))
    assert failed["failed"] and failed["msg"].startswith("time to recover regressed: d-3 recovered in 80.0 s")
    relaxed = run(monkeypatch, capsys, drill_history, dict(args, fail_on_regression=True, tolerance=1.0))
    assert not relaxed.get("failed") and not relaxed["regressed"]
    few = run(monkeypatch, capsys, drill_history, dict(args, experiment="gpu_burn"))
    assert few["why"].startswith("not enough drills") and few["drills"] == []
    bad = run(monkeypatch, capsys, drill_history, dict(args, last=1))
    assert bad["failed"] and bad["field"] == "last"
