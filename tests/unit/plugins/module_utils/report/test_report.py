# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The drill document and its renderers: schema, checks, JUnit, Markdown, SVG, HTML, and the writer."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import jsonschema
import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils import report
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import (
    document,
    html_page,
    junit,
    markdown,
    timeline_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
ALL = list(report.FORMATS)


# -- schema and check --------------------------------------------------------------------------------
def validator():
    jsonschema.Draft202012Validator.check_schema(document.DRILL_SCHEMA)
    return jsonschema.Draft202012Validator(document.DRILL_SCHEMA)


def test_the_schema_accepts_both_samples(passed, failed):
    for doc in (passed, failed):
        assert list(validator().iter_errors(doc)) == []
        assert document.check(doc) is doc


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d.pop("id"), "id"),
        (lambda d: d.pop("steps"), "steps"),
        (lambda d: d.update(schema="gpufleet.drill/v2"), "schema"),
        (lambda d: d.update(id="../../etc/passwd"), "id"),
        (lambda d: d.update(result="green"), "result"),
        (lambda d: d["steps"][2].update(verdict="ok"), "steps/2/verdict"),
        (lambda d: d["steps"][0].update(step="guessed"), "steps/0/step"),
        (lambda d: d["events"][1].update(at="soon"), "events/1/at"),
        (lambda d: d["metrics"].update(steps_lost=-1), "metrics/steps_lost"),
        (lambda d: d["faults"][0].update(rollback="maybe"), "faults/0/rollback"),
        (lambda d: d["gaps"].append({"step": "alerted", "what": "no alert"}), "gaps/0"),
    ],
)
def test_the_schema_rejects_bad_documents(passed, change, where):
    change(passed)
    errors = list(validator().iter_errors(passed))
    assert errors
    assert any("/".join(str(p) for p in error.absolute_path) == where or where in ("id", "steps", "schema", "result")
               for error in errors), [e.message for e in errors]


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d.pop("id"), "id"),
        (lambda d: d.update(id=""), "id"),
        (lambda d: d.update(id="../x"), "id"),
        (lambda d: d.update(id="a/b"), "id"),
        (lambda d: d.pop("experiment"), "experiment"),
        (lambda d: d.pop("steps"), "steps"),
        (lambda d: d.update(steps={"detected": "pass"}), "steps"),
        (lambda d: d.update(steps=["pass"]), "steps[0]"),
        (lambda d: d["steps"][3].update(verdict="green"), "steps[3].verdict"),
        (lambda d: d["steps"][1].pop("verdict"), "steps[1].verdict"),
        (lambda d: d["steps"][1].pop("step"), "steps[1].step"),
        (lambda d: d.update(result="won"), "result"),
        (lambda d: d.update(schema="gpufleet.drill/v0"), "schema"),
        (lambda d: d["events"][2].update(at=None), "events[2]"),
        (lambda d: d.update(metrics=[1, 2]), "metrics"),
        (lambda d: d.update(faults="none"), "faults"),
        (lambda d: d.update(targets="gpu-a-003"), "targets"),
        (lambda d: d.update(findings=[{"text": "x"}]), "findings"),
        (lambda d: d.update(params=["xid=79"]), "params"),
    ],
)
def test_check_names_the_bad_field(passed, change, field):
    change(passed)
    with pytest.raises(FieldError) as error:
        document.check(passed)
    assert error.value.field == field


def test_check_refuses_a_non_mapping():
    with pytest.raises(FieldError) as error:
        document.check(["not", "a", "drill"])
    assert error.value.field == "drill"


def test_a_minimal_document_renders_in_every_format():
    doc = {"id": "d-1", "experiment": "gpu_xid", "steps": []}
    rendered = {name: text for name, (_file, text) in report.render(doc, ALL).items()}
    assert set(rendered) == set(ALL)
    ET.fromstring(rendered["svg"])
    ET.fromstring(rendered["junit"].encode("utf-8"))
    assert "no events" in rendered["svg"]
    assert "None: every fault was detected" in rendered["markdown"]


def test_summary_line(passed, failed):
    assert document.summary(passed) == (
        "drill d-20261130-195000-ab12 gpu_xid on gpu-a-003: passed; "
        "detect 2.1s alert 4.3s quarantine 19.8s recover 45.2s; 0 gaps")
    assert document.summary(failed).endswith("failed; detect 2.0s alert 4.1s quarantine n/a recover n/a; 2 gaps")
    failed["gaps"] = failed["gaps"][:1]
    assert document.summary(failed).endswith("; 1 gap")


def test_times_are_relative_to_the_injection(passed):
    assert document.origin(passed) == passed["events"][0]["at"]
    offsets = [round(offset, 1) for offset, _event in document.events(passed)]
    assert offsets == [0.0, 2.1, 4.3, 19.8, 24.6, 45.2, 52.4, 58.9]
    del passed["events"]
    assert document.origin(passed) == passed["started_at"]
    assert document.step_elapsed(passed, {"at": passed["started_at"] + 3.0}) == pytest.approx(3.0)


# -- JUnit -------------------------------------------------------------------------------------------
def suite_of(xml_text):
    root = ET.fromstring(xml_text.encode("utf-8"))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    return root, suites[0]


def test_junit_passing_drill_has_one_green_testcase_per_step(passed):
    root, suite = suite_of(junit.render(passed))
    assert suite.get("name") == "drill gpu_xid"
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == ["detected", "alerted", "scheduler", "recovered"]
    assert all(case.find("failure") is None and case.find("skipped") is None for case in cases)
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "0", "0")
    assert cases[3].get("time") == "45.200"
    assert root.get("tests") == "4"


def test_junit_failing_drill_marks_the_missed_steps(failed):
    _root, suite = suite_of(junit.render(failed))
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert cases["detected"].find("failure") is None
    assert "gpu-a-003 was still IDLE" in cases["scheduler"].find("failure").get("message")
    assert "120.0 s" in cases["scheduler"].find("failure").get("message")
    assert cases["recovered"].find("failure") is not None
    assert suite.get("failures") == "2"


def test_junit_skipped_and_not_observable_are_skipped(failed):
    failed["steps"][1].update(verdict="not_observable", observed="no Alertmanager in this lab")
    failed["steps"][0].update(verdict="skipped", observed="dry run")
    _root, suite = suite_of(junit.render(failed))
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert cases["alerted"].find("skipped").get("message") == "not observable: no Alertmanager in this lab"
    assert cases["detected"].find("skipped").get("message") == "skipped: dry run"
    assert suite.get("skipped") == "2"


def test_junit_a_failed_phase_is_a_failed_testcase(passed):
    passed["phases"][5].update(ok=False, detail={"failed": "f-20261130-195012-79a4: kernel log not writable"})
    _root, suite = suite_of(junit.render(passed))
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases][-1] == "phase rollback"
    failure = cases[-1].find("failure")
    assert failure.get("message") == "phase rollback failed"
    assert "kernel log not writable" in failure.text
    assert (suite.get("tests"), suite.get("failures")) == ("5", "1")


def test_junit_escapes_text(passed):
    passed["steps"][0]["observed"] = 'a <b> & "c" \x27d\x27'
    passed["steps"][0]["verdict"] = "fail"
    _root, suite = suite_of(junit.render(passed))
    assert suite.find("testcase/failure").get("message").startswith('a <b> & "c" \x27d\x27')


# -- Markdown ----------------------------------------------------------------------------------------
def test_markdown_has_every_section_and_the_gaps(failed):
    text = markdown.render(failed)
    for heading in ("## Timeline", "## Feedback loop", "## Times", "## Findings", "## Observability gaps",
                    "## Faults and rollback", "## Phases", "## Simulated"):
        assert heading + "\n" in text
    gaps = text.split("## Observability gaps\n", 1)[1].split("\n## ", 1)[0]
    assert "**scheduler responded?**" in gaps
    assert "Add: an alert rule GpuFatalXidNodeNotFenced" in gaps
    assert "gpufleet_train_sim_step" in gaps
    assert "| scheduler responded? | FAIL | n/a | 120.0 s |" in text
    assert "| Time to recover | n/a |" in text
    assert "| Steps of work lost | n/a |" in text
    assert "the remediation loop (role self\\_healing) is switched off" not in text  # intraword: not escaped
    assert "self_healing" in text


def test_markdown_passing_drill_says_no_gaps(passed):
    text = markdown.render(passed)
    assert "None: every fault was detected and alerted on." in text
    assert "| Time to recover | 45.2 s |" in text
    assert "| Steps of work lost | 0 |" in text
    assert "| f-20261130-195012-79a3 | gpu-a-003 | nvml_sim |" in text


def test_markdown_escapes_what_would_break_a_table(passed):
    passed["findings"] = ["a | b <script> *c* _d_ `e`"]
    line = next(ln for ln in markdown.render(passed).splitlines() if ln.startswith("- a"))
    assert line == "- a \\| b \\<script> \\*c\\* \\_d\\_ \\`e\\`"


# -- SVG ---------------------------------------------------------------------------------------------
def test_svg_parses_and_has_every_event_and_step(passed):
    root = ET.fromstring(timeline_svg.render(passed))
    assert root.tag == SVG + "svg"
    assert root.get("width") == "1000" and 220 <= int(root.get("height")) <= 360
    groups = {g.get("class") for g in root.iter(SVG + "g")}
    for name in ("inject", "detect", "alert", "quarantine", "requeue", "resume", "rollback", "verify"):
        assert "event event-%s" % name in groups
    for step in ("detected", "alerted", "scheduler", "recovered"):
        assert "step step-%s verdict-pass" % step in groups
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "detect +2.1 s" in texts and "resume +45.2 s" in texts
    assert "PASS at 45.2 s, deadline 300 s" in texts


def test_svg_colours_failed_steps_and_keeps_labels_apart(failed):
    root = ET.fromstring(timeline_svg.render(failed))
    bars = {g.get("class"): g for g in root.iter(SVG + "g") if g.get("class", "").startswith("step ")}
    red = bars["step step-scheduler verdict-fail"].find(SVG + "rect")
    assert red.get("fill") == timeline_svg.VERDICT_COLOURS["fail"][0]
    assert [t.text for t in bars["step step-scheduler verdict-fail"].iter(SVG + "text")][-1] == (
        "FAIL: not seen, deadline 120 s")
    # detect (+2.0 s) and alert (+4.1 s) are a few pixels apart: their labels go on different rows.
    ys = {t.text.split()[0]: float(t.get("y")) for t in root.iter(SVG + "text") if t.text and "+" in t.text}
    assert len({ys["inject"], ys["detect"], ys["alert"]}) == 3


def test_svg_escapes_text_and_handles_no_events(passed):
    passed["events"][0]["detail"] = '<script>alert("x")</script> & more'
    passed["experiment"] = "gpu_<xid>"
    text = timeline_svg.render(passed)
    assert "<script>" not in text
    ET.fromstring(text)
    passed["events"] = []
    for step in passed["steps"]:
        step.update(verdict="skipped", at=None, elapsed_s=None)
    root = ET.fromstring(timeline_svg.render(passed))
    texts = [t.text for t in root.iter(SVG + "text")]
    assert any("no events" in (text or "") for text in texts)
    assert "skipped, deadline 30 s" in texts


def test_svg_labels_stay_inside_the_picture(passed):
    # In time order, as render gives them: the last two sit at the right edge and end there, on two rows.
    placed = timeline_svg.place_labels([(150.0, "inject"), (985.0, "rollback +52.4 s"), (990.0, "verify +58.9 s")])
    assert placed[0] == (150.0, "inject", 0, "start")
    assert [anchor for _x, _label, _row, anchor in placed[1:]] == ["end", "end"]
    assert placed[1][2] != placed[2][2]


@pytest.mark.parametrize("span, step", [(60, 10), (313, 50), (5, 1), (0.4, 0.05), (2000, 500)])
def test_nice_tick_steps(span, step):
    assert timeline_svg.nice_step(span, most=8) == pytest.approx(step)


# -- HTML --------------------------------------------------------------------------------------------
class Tree(HTMLParser):
    """Records the id-path of every start tag: enough to find the svg inside #timeline."""

    def __init__(self):
        super().__init__()
        self.stack, self.found, self.urls = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.found.append((tag, [a for a in self.stack if a], attrs.get("id")))
        self.urls += [value for name, value in attrs.items() if name in ("src", "href", "xlink:href") and value]
        if tag not in ("meta", "br", "img", "link", "input", "circle", "line", "rect", "path"):
            self.stack.append(attrs.get("id") or "")

    def handle_startendtag(self, tag, attrs):
        self.found.append((tag, [a for a in self.stack if a], dict(attrs).get("id")))

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()


def test_html_is_self_contained_with_the_svg_in_the_timeline(failed):
    page = html_page.render(failed)
    tree = Tree()
    tree.feed(page)
    assert ("svg", ["timeline"], None) in tree.found
    assert tree.urls == []
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page, re.I)
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert page.count("<svg") == 1


def test_html_has_the_markdown_content(failed):
    page = html_page.render(failed)
    assert '<span class="verdict v-fail">FAIL</span>' in page
    assert '<h2 id="gaps">Observability gaps</h2>' in page
    assert "gpufleet_gpu_xid_total{severity=&quot;fatal&quot;} &gt; 0" in page
    for label, value in document.time_rows(failed) + document.facts(failed):
        assert "<td>%s</td><td>%s</td>" % (html_page.esc(label), html_page.esc(value)) in page
    for finding in failed["findings"]:
        assert html_page.esc(finding) in page


def test_html_escapes_text(passed):
    passed["findings"] = ['<img src="http://x/y.png"> & <b>']
    page = html_page.render(passed)
    assert "<img" not in page and "&lt;img src=&quot;http://x/y.png&quot;&gt; &amp; &lt;b&gt;" in page


# -- writing -----------------------------------------------------------------------------------------
def test_write_reports_writes_each_format_once(passed, tmp_path):
    dest = tmp_path / "reports" / "drills"
    first = report.write_reports(passed, str(dest), ALL, check_mode=False)
    names = sorted(os.listdir(dest))
    ident = "d-20261130-195000-ab12"
    assert names == sorted("drill-%s.%s" % (ident, ext) for ext in ("json", "junit.xml", "md", "html", "svg"))
    assert first["changed"] and len(first["changed_files"]) == 5
    assert first["files"]["junit"] == str(dest / ("drill-%s.junit.xml" % ident))
    assert json.loads((dest / ("drill-%s.json" % ident)).read_text()) == passed
    assert oct(os.stat(first["files"]["html"]).st_mode & 0o777) == "0o644"
    again = report.write_reports(passed, str(dest), ALL, check_mode=False)
    assert not again["changed"] and again["changed_files"] == []
    assert again["summary"] == first["summary"] == document.summary(passed)
    assert not [name for name in os.listdir(dest) if name.endswith(".tmp")]


def test_write_reports_rewrites_only_what_changed(passed, tmp_path):
    report.write_reports(passed, str(tmp_path), ALL, check_mode=False)
    passed["findings"] = ["a new finding"]
    result = report.write_reports(passed, str(tmp_path), ["markdown", "svg"], check_mode=False)
    assert list(result["files"]) == ["markdown", "svg"]
    assert result["changed_files"] == [result["files"]["markdown"]]  # findings are not in the picture


def test_write_reports_check_mode_writes_nothing(passed, tmp_path):
    dest = tmp_path / "new"
    result = report.write_reports(passed, str(dest), ALL, check_mode=True)
    assert result["changed"] and len(result["changed_files"]) == 5
    assert not dest.exists()
    report.write_reports(passed, str(dest), ALL, check_mode=False)
    assert not report.write_reports(passed, str(dest), ALL, check_mode=True)["changed"]


def test_write_reports_refuses_bad_input_before_writing(passed, tmp_path):
    passed["steps"][0]["verdict"] = "maybe"
    with pytest.raises(FieldError) as error:
        report.write_reports(passed, str(tmp_path / "x"), ALL, check_mode=False)
    assert error.value.field == "steps[0].verdict"
    assert not (tmp_path / "x").exists()
    passed["steps"][0]["verdict"] = "pass"
    (tmp_path / "file").write_text("")
    with pytest.raises(FieldError) as error:
        report.write_reports(passed, str(tmp_path / "file"), ALL, check_mode=False)
    assert error.value.field == "dest"
    with pytest.raises(FieldError) as error:
        report.render(passed, ["pdf"])
    assert error.value.field == "formats"


def test_write_reports_turns_a_write_error_into_a_dest_error(passed, tmp_path, monkeypatch):
    def refuse(path, data):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(report, "write_atomic", refuse)
    with pytest.raises(FieldError) as error:
        report.write_reports(passed, str(tmp_path), ALL, check_mode=False)
    assert error.value.field == "dest" and "Permission denied" in error.value.message


def test_write_atomic_leaves_no_temp_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "drill-x.md"
    target.write_text("old")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        report.write_atomic(str(target), b"new")
    assert os.listdir(tmp_path) == ["drill-x.md"] and target.read_text() == "old"
