# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The resiliency score's trend as a picture in the HTML report: the chart, the page's section, and
the drills write_reports takes it from (the report directory, as drills accumulate there)."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.resilience.plugins.module_utils import report
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import html_page, score_svg

SVG = "{http://www.w3.org/2000/svg}"


def drills(scores):
    return [{"id": "d-%d" % n, "score": score, "result": "pass" if score >= 50 else "fail"}
            for n, score in enumerate(scores)]


def trend_points(page):
    """The points of the page's score chart (the timeline has circles of its own)."""
    if '<div id="score-trend">' not in page:
        return 0
    return page.split('<div id="score-trend">', 1)[1].split("</div>", 1)[0].count("<circle")


def test_one_point_per_drill_on_a_fixed_axis_the_newest_larger():
    root = ET.fromstring(score_svg.render(drills([40.0, 80.0, 100.0]), median_before=60.0))
    circles = root.findall(SVG + "circle")
    assert [c.get("r") for c in circles] == ["4", "4", "6"]
    heights = [float(c.get("cy")) for c in circles]
    assert heights[0] > heights[1] > heights[2], "a higher score is drawn higher"
    assert float(circles[2].get("cy")) == score_svg.TOP, "100 is the top of the axis, whatever the data"
    assert circles[0].find(SVG + "title").text == "d-0: fail, score 40"
    dashed = [line for line in root.findall(SVG + "line") if line.get("stroke-dasharray")]
    sixty = score_svg.BOTTOM - (score_svg.BOTTOM - score_svg.TOP) * 0.6
    assert len(dashed) == 1 and float(dashed[0].get("y1")) == sixty
    assert len(root.findall(SVG + "polyline")) == 1


def test_ids_from_the_report_directory_are_escaped():
    picture = score_svg.render([{"id": '<b onload="x">', "score": 10.0, "result": "<i>"}])
    root = ET.fromstring(picture)  # still well-formed
    assert "<b " not in picture and "&lt;b onload=&quot;x&quot;&gt;" in picture
    assert root.findall(SVG + "polyline") == [], "one drill is a point, not a line"


def test_the_page_draws_the_trend_when_it_is_given(passed):
    passed["score"] = 90.0
    rows = [{"id": "d-old-1", "score": 70.0, "result": "passed"}, {"id": "d-old-2", "score": None, "result": "refused"},
            {"id": "d-old-3", "score": 80.0, "result": "passed"},
            {"id": passed["id"], "score": 90.0, "result": "passed"}]
    page = html_page.render(passed, rows)
    assert '<h2 id="trend">Resiliency score trend</h2>' in page
    assert "<p>Score 90; the median of the 2 scored drills before it here is 75 (+15.0).</p>" in page
    assert '<div id="score-trend">\n<svg ' in page and trend_points(page) == 3
    assert "trend" not in html_page.render(passed).lower(), "no history given: no section"


def test_the_page_says_when_there_is_no_trend_yet(passed):
    passed["score"] = 90.0
    page = html_page.render(passed, [{"id": passed["id"], "score": 90.0, "result": "passed"}])
    assert "The first scored gpu_xid drill in this report directory: no trend yet." in page
    assert trend_points(page) == 0
    page = html_page.render(passed, [{"id": passed["id"], "score": None, "result": "dry_run"}])
    assert "This drill has no resiliency score" in page


def test_write_reports_takes_the_trend_from_the_drills_already_there(passed, tmp_path):
    dest = tmp_path / "drills"

    def drill(n, score, experiment="gpu_xid"):
        doc = copy.deepcopy(passed)
        doc.update(id="d-%d" % n, score=score, experiment=experiment, started_at=passed["started_at"] + 3600 * n)
        return doc

    first = drill(1, 60.0)
    report.write_reports(first, str(dest), ["json", "html"], check_mode=False)
    report.write_reports(drill(2, 50.0, experiment="gpu_burn"), str(dest), ["json", "html"], check_mode=False)
    (dest / "drill-junk.json").write_text("not a drill")
    report.write_reports(drill(3, 70.0), str(dest), ["json", "html"], check_mode=False)
    written = report.write_reports(drill(4, 100.0), str(dest), ["json", "html"], check_mode=False)
    page = (dest / "drill-d-4.html").read_text()
    assert "<p>Score 100; the median of the 2 scored drills before it here is 65 (+35.0).</p>" in page
    assert trend_points(page) == 3, "gpu_xid's three drills, not gpu_burn's, not the junk file"
    assert written["changed"]
    # Rendered again after later drills, an earlier drill's page shows the trend up to it only.
    again = report.write_reports(first, str(dest), ["json", "html"], check_mode=False)
    assert not again["changed"]
    assert "no trend yet" in (dest / "drill-d-1.html").read_text()
    # A drill's own earlier copy in the directory is not counted twice.
    assert report.write_reports(drill(4, 100.0), str(dest), ["json", "html"], check_mode=False)["changed"] is False
