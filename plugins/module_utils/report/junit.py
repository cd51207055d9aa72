# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A drill as JUnit XML, for AWX and CI: one testcase per loop step, plus one per failed phase. Pure.

A step's ``fail`` is a ``<failure>``; ``skipped`` and ``not_observable`` are ``<skipped>`` (a step the
lab cannot observe is not a red test, but it must not look green either). A failed phase, a rollback
above all, is a failed testcase of its own: a fault left behind must turn the CI run red even when
every loop step passed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.report import document


def _time(value: Optional[float]) -> str:
    return "%.3f" % (value if value is not None and value > 0 else 0.0)


def _step_case(suite: ET.Element, doc: Mapping[str, Any], step: Mapping[str, Any]) -> str:
    name = str(step.get("step"))
    case = ET.SubElement(suite, "testcase", classname="drill.%s" % doc["experiment"],
                         name=name, time=_time(document.step_elapsed(doc, step)))
    deadline = document.seconds(step.get("deadline_s"))
    text = "expected: %s\nobserved: %s\ndeadline: %s, seen after: %s" % (
        step.get("expected") or "-", step.get("observed") or "-", deadline,
        document.seconds(document.step_elapsed(doc, step)))
    verdict = step.get("verdict")
    if verdict == "fail":
        ET.SubElement(case, "failure", message="%s (deadline %s)" % (step.get("observed") or "not seen", deadline),
                      type="missed").text = text
    elif verdict in ("skipped", "not_observable"):
        ET.SubElement(case, "skipped", message="%s: %s" % (
            document.VERDICT_LABELS[verdict], step.get("observed") or "no observation")).text = text
    else:
        ET.SubElement(case, "system-out").text = text
    return verdict


def _phase_case(suite: ET.Element, doc: Mapping[str, Any], phase: Mapping[str, Any]) -> None:
    start, end = document.number(phase.get("started_at")), document.number(phase.get("finished_at"))
    case = ET.SubElement(suite, "testcase", classname="drill.%s" % doc["experiment"],
                         name="phase %s" % phase.get("phase"),
                         time=_time(None if start is None or end is None else end - start))
    detail = phase.get("detail") or {}
    message = "phase %s failed" % phase.get("phase")
    if doc.get("abort_reason"):
        message += ": %s" % doc["abort_reason"]
    ET.SubElement(case, "failure", message=message, type="phase").text = "\n".join(
        "%s: %s" % (key, detail[key]) for key in sorted(detail))


def _indent(element: ET.Element, level: int = 0) -> None:
    # ET.indent exists only from Python 3.9; modules still run on 3.8 targets.
    pad = "\n" + "  " * (level + 1)
    children = list(element)
    if children and not (element.text or "").strip():
        element.text = pad
    for child in children:
        _indent(child, level + 1)
        if not (child.tail or "").strip():
            child.tail = pad
    if children:
        children[-1].tail = "\n" + "  " * level


def render(doc: Mapping[str, Any]) -> str:
    suites = ET.Element("testsuites", name="gpufleet drill %s" % doc["id"])
    suite = ET.SubElement(suites, "testsuite", name="drill %s" % doc["experiment"], id=str(doc["id"]))
    if document.number(doc.get("started_at")) is not None:
        suite.set("timestamp", document.clock(doc["started_at"]).replace(" UTC", "").replace(" ", "T"))
    properties = ET.SubElement(suite, "properties")
    figures = document.metrics(doc)
    for name, value in (("id", doc["id"]), ("result", doc.get("result")), ("targets", document.targets(doc)),
                        ("params", document.params_text(doc)), ("abort_reason", doc.get("abort_reason")),
                        *[(key, figures.get(key)) for key, _label in document.TIMES],
                        ("steps_lost", figures.get("steps_lost"))):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=str(value))
    verdicts = [_step_case(suite, doc, step) for step in doc.get("steps") or []]
    failed = document.failed_phases(doc)
    for phase in failed:
        _phase_case(suite, doc, phase)
    suites.set("tests", str(len(verdicts) + len(failed)))
    suites.set("failures", str(verdicts.count("fail") + len(failed)))
    for key in ("tests", "failures"):
        suite.set(key, suites.get(key))
    suite.set("errors", "0")
    suite.set("skipped", str(len([v for v in verdicts if v in ("skipped", "not_observable")])))
    suite.set("time", _time(document.duration(doc)))
    suites.set("time", suite.get("time"))
    _indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
