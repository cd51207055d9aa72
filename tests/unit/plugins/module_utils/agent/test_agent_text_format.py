# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The agent's own text-format writer, read back by prometheus-client's parser: what a scrape says is
what the families hold, whatever the label values and help texts contain; and the agent never imports
prometheus-client (its budget, issue 17 P5)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.text_format import (
    COUNTER,
    Family,
    format_value,
    render,
    single,
)


def parsed(text: bytes):
    return {family.name: family for family in text_string_to_metric_families(text.decode("utf-8"))}


# Help texts are the agent's own constants: any character but control ones (the format escapes only
# backslash and newline there, as prometheus-client's writer does), no outer whitespace. Label values
# carry data (UUIDs, HCA and job names): anything at all.
HELP_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=40).map(str.strip)


@given(values=st.lists(st.text(), min_size=1, max_size=5),
       documentation=HELP_TEXT,
       number=st.floats(allow_nan=False))
def test_any_label_value_and_help_text_read_back_as_written(values, documentation, number):
    family = Family("gpufleet_test_gauge", documentation, labels=("value",))
    for index, value in enumerate(values):
        family.add_metric([value], number + index if math.isfinite(number + index) else number)
    seen = parsed(render([family]))["gpufleet_test_gauge"]
    assert seen.type == "gauge" and seen.documentation == documentation
    assert [sample.labels["value"] for sample in seen.samples] == values
    assert [sample.value for sample in seen.samples] == [value for _labels, value in family.samples]


def test_a_counter_its_labels_sorted_and_the_special_values():
    errors = Family("gpufleet_test_errors_total", "Errors, by source", COUNTER, ("source", "kind"))
    errors.add_metric(["nvml", "b"], 3)
    text = render([errors, single("gpufleet_test_up", "Up", 1), single("gpufleet_test_inf", "Inf", math.inf)])
    assert (b'# TYPE gpufleet_test_errors_total counter\n'
            b'gpufleet_test_errors_total{kind="b",source="nvml"} 3.0\n') in text
    families = parsed(text)
    assert families["gpufleet_test_errors"].type == "counter"
    assert families["gpufleet_test_errors"].samples[0].value == 3.0
    assert families["gpufleet_test_up"].samples[0].value == 1.0
    assert families["gpufleet_test_inf"].samples[0].value == math.inf
    assert format_value(float("nan")) == "NaN" and format_value(-math.inf) == "-Inf"
    assert format_value(1799999960.0) == "1.79999996e+09" and format_value(96) == "96.0"


def test_bad_families_are_refused():
    with pytest.raises(ValueError, match="must end in _total"):
        Family("gpufleet_test_errors", "Errors", COUNTER)
    with pytest.raises(ValueError, match="1 label values"):
        Family("gpufleet_test", "T", labels=("a", "b")).add_metric(["x"], 1)


def test_the_agent_never_imports_prometheus_client():
    code = ("import sys; import ansible_collections.gpufleet.resilience.plugins.module_utils.agent.__main__; "
            "import ansible_collections.gpufleet.resilience.plugins.module_utils.agent.loop; "
            "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert found.stdout.strip() == "[]", found.stdout
