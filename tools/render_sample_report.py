#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Render the sample drill report that docs/chaos.md shows, from a real drill document.

docs/chaos-sample-drill.json is the document of the XID 79 drill that the end-to-end test ran in the lab
(tests/integration/chaos/test_drill_end_to_end.py), copied as it was written.

    python3 tools/render_sample_report.py            # rewrite docs/chaos-sample-report.html and its SVG
    python3 tools/render_sample_report.py --check    # exit 1 if the committed files are stale

A unit test runs the check, so a change to the renderers that alters the sample fails until the
files are regenerated and committed with it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Dict

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "docs" / "chaos-sample-drill.json"
OUTPUTS = {
    "html": REPO / "docs" / "chaos-sample-report.html",
    "svg": REPO / "docs" / "images" / "chaos-sample-timeline.svg",
}


def report_package():
    """The collection's report package, from the repo's collections/ link or from a checkout at its real path."""
    name = "ansible_collections.gpufleet.resilience.plugins.module_utils.report"
    try:
        return importlib.import_module(name)
    except ImportError:
        real = REPO.parents[2] if REPO.parent.name == "gpufleet" else REPO / "collections"
        sys.path.insert(0, str(real))
        return importlib.import_module(name)


def render() -> Dict[str, str]:
    """Output name -> the text it must hold now."""
    report = report_package()
    doc = json.loads(SAMPLE.read_text(encoding="utf-8"))
    rendered = report.render(doc, list(OUTPUTS))
    return {name: text for name, (_file_name, text) in rendered.items()}


def stale() -> Dict[str, Path]:
    return {name: OUTPUTS[name] for name, text in render().items()
            if not OUTPUTS[name].is_file() or OUTPUTS[name].read_text(encoding="utf-8") != text}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed files are stale")
    args = parser.parse_args()
    if args.check:
        old = stale()
        for path in old.values():
            print("stale: %s (run python3 tools/render_sample_report.py)" % path.relative_to(REPO))
        return 1 if old else 0
    for name, text in render().items():
        OUTPUTS[name].parent.mkdir(parents=True, exist_ok=True)
        OUTPUTS[name].write_text(text, encoding="utf-8")
        print("wrote %s" % OUTPUTS[name].relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
