# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The drill's HTML report in a real browser: headless Chromium (the Debian package) renders it offline.

The sample XID 79 drill is rendered with drill_report's own code into a temporary directory. Chromium
takes a screenshot (it must be a real picture, not a blank page) and dumps the DOM after layout, with a
probe script added to a copy of the page that writes the timeline's box into the DOM: the SVG is inside
#timeline, has a real size, and lies in the first screen. No lab is needed. A missing chromium fails the
test: CI installs it (Makefile DEBS).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import List

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils import report

pytestmark = [pytest.mark.integration]

SAMPLE = Path(__file__).resolve().parents[2] / "unit" / "plugins" / "module_utils" / "report" / "sample_drill.json"
WINDOW = (1280, 1400)
PROBE = """<script>
window.addEventListener("load", function () {
  var svg = document.querySelector("#timeline > svg");
  var box = svg ? svg.getBoundingClientRect() : null;
  document.body.setAttribute("data-timeline-box",
    box ? [box.left, box.top, box.width, box.height].map(Math.round).join(",") : "none");
});
</script>
</body>"""


def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if not found:
        pytest.fail("chromium is not installed: apt-get install --no-install-recommends chromium (Makefile DEBS)")
    return found


def browse(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
            "--user-data-dir=%s" % (tmp_path / "profile"), "--window-size=%d,%d" % WINDOW, *extra, url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


class Inside(HTMLParser):
    """Which tags appear inside the element with id="timeline"."""

    VOID = {"meta", "br", "img", "link", "input", "hr"}

    def __init__(self):
        super().__init__()
        self.stack: List[str] = []
        self.in_timeline: List[str] = []

    def handle_starttag(self, tag, attrs):
        if "timeline" in self.stack:
            self.in_timeline.append(tag)
        if tag not in self.VOID:
            self.stack.append(dict(attrs).get("id") or tag)

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()


@pytest.fixture
def rendered(tmp_path):
    doc = json.loads(SAMPLE.read_text(encoding="utf-8"))
    result = report.write_reports(doc, str(tmp_path / "drills"), ["html", "svg"], check_mode=False)
    return Path(result["files"]["html"])


def test_the_html_report_renders_with_its_timeline(tmp_path, rendered):
    shot = tmp_path / "report.png"
    browse(tmp_path, rendered.as_uri(), "--screenshot=%s" % shot)
    assert shot.is_file()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == WINDOW
    # A blank 1280x1400 page compresses to a few kB; text, tables and the picture take far more.
    assert len(data) > 20000, len(data)

    dom = browse(tmp_path, rendered.as_uri(), "--dump-dom").stdout
    inside = Inside()
    inside.feed(dom)
    assert "svg" in inside.in_timeline, dom[:2000]
    assert inside.in_timeline.count("text") >= 8 + 4  # the event labels and the step titles at least


def test_the_timeline_is_laid_out_in_the_first_screen(tmp_path, rendered):
    probe = rendered.with_name("probe.html")
    probe.write_text(rendered.read_text(encoding="utf-8").replace("</body>", PROBE), encoding="utf-8")
    dom = browse(tmp_path, probe.as_uri(), "--dump-dom").stdout
    found = re.search(r'data-timeline-box="(-?\d+),(-?\d+),(\d+),(\d+)"', dom)
    assert found, dom[:2000]
    left, top, width, height = (int(value) for value in found.groups())
    assert left >= 0 and left + width <= WINDOW[0]
    assert 0 < top < WINDOW[1] - height  # the whole picture is on the first screen of the screenshot
    assert width >= 900 and height >= 200
