# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The sample report committed under docs/ (a real lab drill) is what tools/render_sample_report.py renders now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[5]
SCRIPT = REPO / "tools" / "render_sample_report.py"


def load_script():
    spec = importlib.util.spec_from_file_location("render_sample_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_sample_report_is_current():
    script = load_script()
    stale = script.stale()
    assert not stale, "stale: %s; run python3 tools/render_sample_report.py and commit the result" % sorted(
        str(path.relative_to(REPO)) for path in stale.values())


def test_the_sample_report_is_the_passing_xid_79_drill():
    script = load_script()
    page = script.OUTPUTS["html"].read_text(encoding="utf-8")
    assert "gpu_xid on gpu-a-001, PASSED" in page and '<div id="timeline">\n<svg ' in page
    assert script.OUTPUTS["svg"].read_text(encoding="utf-8").startswith('<svg xmlns="http://www.w3.org/2000/svg"')
