# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A drill as a Markdown report (for a pull request, a wiki, a ticket). Pure.

The sections are those of the HTML page, from the same rows (``document``): the verdict per loop step,
the four times and the steps lost, the findings, the observability gaps with what to add, the faults
and their rollback, and what was simulated.
"""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.report import document

# Text from the drill goes into table cells and list items (never at a line's start, so > and # are
# safe): escape what Markdown would act on there. An underscore inside a word (metric names) is literal
# in CommonMark, so only one at a word's edge is escaped.
_SPECIAL = re.compile(r"([\\`*\[\]<|])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def text(value: Any) -> str:
    flat = " ".join(str(value).split())
    return _SPECIAL.sub(lambda match: "\\" + match.group(0), flat)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    lines = ["| %s |" % " | ".join(text(cell) for cell in header), "|%s" % ("---|" * len(header))]
    lines.extend("| %s |" % " | ".join(text(cell) for cell in row) for row in rows)
    return lines


def bullets(items: Sequence[str], empty: str) -> List[str]:
    return ["- %s" % text(item) for item in items] or [empty]


def render(doc: Mapping[str, Any]) -> str:
    lines = ["# %s" % text(document.title(doc)), ""]
    lines += ["`%s`" % document.summary(doc).replace("`", "'"), ""]
    lines += table(("Field", "Value"), document.facts(doc))
    lines += ["", "## Timeline", "", "t=0 is the injection; the picture is drill-%s.svg and in the HTML report."
              % doc["id"], ""]
    lines += table(document.EVENT_HEADER, document.event_rows(doc)) if doc.get("events") else ["No events."]
    lines += ["", "## Feedback loop", ""]
    lines += table(document.STEP_HEADER, document.step_rows(doc))
    lines += ["", "## Times", ""]
    lines += table(("Measure", "Value"), document.time_rows(doc))
    lines += ["", "## Findings", ""]
    lines += bullets(doc.get("findings") or [], "None.")
    lines += ["", "## Observability gaps", ""]
    gaps = document.gap_items(doc)
    lines += ["- **%s** %s. Add: %s" % (text(step), text(what).rstrip("."), text(add)) for step, what, add in gaps] or [
        "None: every fault was detected and alerted on."]
    lines += ["", "## Faults and rollback", ""]
    lines += table(document.FAULT_HEADER, document.fault_rows(doc)) if doc.get("faults") else ["No fault injected."]
    lines += ["", "## Phases", ""]
    lines += table(document.PHASE_HEADER, document.phase_rows(doc))
    lines += ["", "## Simulated", ""]
    lines += bullets(doc.get("simulated") or [], "Nothing: every fault was real.")
    return "\n".join(lines) + "\n"
