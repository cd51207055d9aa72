# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Drill reports: the calls the drill_report and drill_history modules make, and the files they touch.

The renderers (``junit``, ``markdown``, ``timeline_svg``, ``html_page``) and the comparison
(``history``) are pure; this file is the only one of the package that reads or writes files. A report
is rewritten only when its bytes change (temp file in the same directory, then rename), so a rerun is
``changed=false`` and a reader never sees half a file.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import read_or_none, write_atomic
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import (
    document,
    history,
    html_page,
    junit,
    markdown,
    timeline_svg,
)


def as_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# format -> (file name suffix, renderer); the order is the order of the module's `files`.
FORMATS: Dict[str, Tuple[str, Callable[[Mapping[str, Any]], str]]] = {
    "json": (".json", as_json),
    "junit": (".junit.xml", junit.render),
    "markdown": (".md", markdown.render),
    "html": (".html", html_page.render),
    "svg": (".svg", timeline_svg.render),
}


# How many of an experiment's drills the HTML page's score trend shows, this one included.
TREND_LAST = 10


def trend_rows(doc: Mapping[str, Any], earlier: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """History rows of the drill's experiment, up to and including the drill: the drills of
    ``earlier`` that started no later than it (so a page rendered again later shows the same
    trend), another copy of the drill itself left out."""
    started = document.number(doc.get("started_at")) or 0.0
    before = [other for other in earlier if other.get("id") != doc.get("id")
              and (document.number(other.get("started_at")) or 0.0) <= started]
    rows = history.window(before, str(doc.get("experiment")), TREND_LAST - 1)
    return [*rows, history.row(doc)]


def render(doc: Mapping[str, Any], formats: Sequence[str],
           earlier: Optional[Sequence[Mapping[str, Any]]] = None) -> Dict[str, Tuple[str, str]]:
    """format -> (file name, text), after ``document.check``. With ``earlier`` (the drill documents
    already in the report directory), the HTML page also draws the score's trend."""
    document.check(doc)
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise FieldError("formats", "unknown %s; choose from %s" % (", ".join(unknown), ", ".join(FORMATS)))
    rendered = {}
    for name in FORMATS:
        if name not in formats:
            continue
        if name == "html" and earlier is not None:
            text = html_page.render(doc, trend_rows(doc, earlier))
        else:
            text = FORMATS[name][1](doc)
        rendered[name] = ("drill-%s%s" % (doc["id"], FORMATS[name][0]), text)
    return rendered


def write_reports(doc: Mapping[str, Any], dest: str, formats: Sequence[str], check_mode: bool) -> Dict[str, Any]:
    """Write the drill's reports into ``dest``; in check mode, only say which files would change."""
    if os.path.exists(dest) and not os.path.isdir(dest):
        raise FieldError("dest", "%s exists and is not a directory" % dest)
    # The earlier drills for the HTML page's score trend; a file that is not a drill is skipped
    # here (drill_history names it).
    earlier = read_drills(dest)[0] if "html" in formats and os.path.isdir(dest) else []
    rendered = render(doc, formats, earlier)
    files, changed = {}, []
    try:
        if not check_mode:
            os.makedirs(dest, exist_ok=True)
        for name, (file_name, text) in rendered.items():
            path = os.path.join(dest, file_name)
            files[name] = path
            data = text.encode("utf-8")
            if read_or_none(path) != data:
                changed.append(path)
                if not check_mode:
                    write_atomic(path, data)
    except OSError as exc:  # a read-only or foreign directory: the user fixes dest
        raise FieldError("dest", "cannot write the reports: %s" % exc) from exc
    return {"changed": bool(changed), "files": files, "changed_files": changed, "summary": document.summary(doc)}


def read_drills(dest: str) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
    """The drill documents in ``dest`` and the files that are not one (each with why)."""
    if not os.path.isdir(dest):
        raise FieldError("dest", "%s is not a directory of drill reports" % dest)
    docs, unreadable = [], []
    for path in sorted(glob.glob(os.path.join(glob.escape(dest), "drill-*.json"))):
        try:
            with open(path, encoding="utf-8") as handle:
                docs.append(document.check(json.load(handle)))
        except (OSError, ValueError) as exc:  # FieldError is a ValueError, as is a JSON syntax error
            unreadable.append({"file": path, "why": str(exc)})
    return docs, unreadable


def drill_history(dest: str, experiment: str, last: int, tolerance: float) -> Dict[str, Any]:
    docs, unreadable = read_drills(dest)
    result = history.compare(docs, experiment, last, tolerance)
    result["unreadable"] = unreadable
    return result
