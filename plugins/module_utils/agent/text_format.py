# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Metric families in the Prometheus text exposition format 0.0.4, for the agent's scrape.

The agent wrote its scrape with prometheus-client. Importing the client costs an agent about 1.8 MiB
of its 30 MiB budget (issue 17, P5): its package imports its push-gateway and server code, and with
it ``urllib.request``, none of which the agent uses. The format itself is a few lines per family
(https://prometheus.io/docs/instrumenting/exposition_formats/): a HELP and a TYPE line, then one line
per sample, with label values and help text escaped. The tests read what this writes with
prometheus-client's own parser, so the library still judges the text; the remediation exporter,
which has no such budget, keeps using the client.

A counter family is named with its ``_total`` suffix, as its samples are (the client names HELP and
TYPE lines of a counter that way too). Pure; standard library only.
"""

from __future__ import annotations

import math
from typing import Iterable, List, Sequence, Tuple

GAUGE = "gauge"
COUNTER = "counter"


class Family:
    """One metric family: its name, type, help text and label names, and the samples added to it."""

    __slots__ = ("documentation", "kind", "labels", "name", "samples")

    def __init__(self, name: str, documentation: str, kind: str = GAUGE, labels: Sequence[str] = ()) -> None:
        if kind == COUNTER and not name.endswith("_total"):
            raise ValueError("counter %s: its name must end in _total" % name)
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.labels = tuple(labels)
        self.samples: List[Tuple[Tuple[str, ...], float]] = []

    def add_metric(self, values: Sequence[str], value: float) -> None:
        """A sample with these label values, in the order of the family's label names."""
        if len(values) != len(self.labels):
            raise ValueError("%s: %d label values for labels %s" % (self.name, len(values), self.labels))
        self.samples.append((tuple(values), value))


def single(name: str, documentation: str, value: float) -> Family:
    """A gauge family of one sample with no labels."""
    family = Family(name, documentation)
    family.add_metric((), value)
    return family


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    """A sample value as the Go clients write it (strconv's shortest %g: exponent form from 1e6 up
    and below 1e-4), with +Inf, -Inf and NaN. Prometheus reads any float syntax; this keeps the text
    as readers of other exporters know it."""
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    text = repr(number)  # the shortest repr that reads back the same, as Go's
    if "e" in text or abs(number) < 1e6:
        return text
    sign, digits = ("-", text[1:]) if number < 0 else ("", text)
    whole, _dot, fraction = digits.partition(".")
    significant = (whole + fraction).rstrip("0")
    mantissa = significant[0] + ("." + significant[1:] if len(significant) > 1 else "")
    return "%s%se+%02d" % (sign, mantissa, len(whole) - 1)


def render(families: Iterable[Family]) -> bytes:
    """The families' text, in the order given."""
    lines: List[str] = []
    for family in families:
        lines.append("# HELP %s %s\n" % (family.name, _help(family.documentation)))
        lines.append("# TYPE %s %s\n" % (family.name, family.kind))
        for values, value in family.samples:
            if values:
                # Sorted by name, as the client libraries write them.
                pairs = ",".join('%s="%s"' % (label, _label_value(str(text)))
                                 for label, text in sorted(zip(family.labels, values)))  # noqa: B905 - Python 3.8 agents; lengths checked
                lines.append("%s{%s} %s\n" % (family.name, pairs, format_value(value)))
            else:
                lines.append("%s %s\n" % (family.name, format_value(value)))
    return "".join(lines).encode("utf-8")
