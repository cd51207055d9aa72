# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A drill's brakes (abort conditions): their checks, and when a breach aborts the watch."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import brakes, observe
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError


def test_none_gives_the_default_brake_and_an_empty_list_none():
    assert [b.name for b in brakes.check_brakes(None)] == ["other_nodes_unhealthy"]
    assert brakes.check_brakes([]) == []
    given = brakes.check_brakes([{"name": "job_stalled", "query": "rate(x[1m])", "above": 0.5, "for": 30}])
    assert given == [brakes.Brake("job_stalled", "rate(x[1m])", 0.5, 30.0)]
    assert brakes.check_brakes([b.as_dict() for b in given]) == given  # what the drill carries, read back


@pytest.mark.parametrize("raw, field", [
    ("count(x) > 1", "abort_conditions"),
    ([{"name": "Bad Name", "query": "x", "above": 1}], "abort_conditions[0].name"),
    ([{"name": "a", "query": "", "above": 1}], "abort_conditions[0].query"),
    ([{"name": "a", "query": "x", "above": "many"}], "abort_conditions[0].above"),
    ([{"name": "a", "query": "x", "above": float("nan")}], "abort_conditions[0].above"),
    ([{"name": "a", "query": "x", "above": 1, "for": -5}], "abort_conditions[0].for"),
    ([{"name": "a", "query": "x", "above": 1, "when": "now"}], "abort_conditions[0].when"),
    ([{"name": "a", "query": "x", "above": 1}, {"name": "a", "query": "y", "above": 2}], "abort_conditions[1].name"),
])
def test_a_bad_brake_is_refused_naming_its_field(raw, field):
    with pytest.raises(FieldError) as error:
        brakes.check_brakes(raw)
    assert error.value.field == field


def test_targets_go_into_the_query_as_a_literal_alternation():
    # The backslash before "." is doubled: PromQL's string takes one, the regular expression the other.
    brake = brakes.DEFAULTS[0]
    assert brake.query_for(["gpu-a.001", "gpu-b-002"]) == \
        'count(gpufleet_node_health_verdict{state!="healthy",node!~"gpu-a\\\\.001|gpu-b-002"} == 1)'


def test_a_breach_aborts_only_once_it_has_lasted_its_duration():
    brake = brakes.Brake("others", "q $targets", above=1.0, for_s=10.0)
    since = {}
    values = {"now": None}
    assert brakes.breached([brake], ["n1"], lambda q: values["now"], since, 0.0) is None  # no data: no breach
    values["now"] = 2.0
    assert brakes.breached([brake], ["n1"], lambda q: values["now"], since, 1.0) is None
    values["now"] = 1.0  # back at the threshold (not above): the clock starts again
    assert brakes.breached([brake], ["n1"], lambda q: values["now"], since, 5.0) is None and since == {}
    values["now"] = 3.0
    assert brakes.breached([brake], ["n1"], lambda q: values["now"], since, 6.0) is None
    reason = brakes.breached([brake], ["n1"], lambda q: values["now"], since, 16.0)
    assert reason == "abort condition others breached: q n1 = 3, above 1 for 10 s"


class Probes(observe.Probes):
    """Our own probe interface: a fault that nothing sees, and another node that goes bad at 4 s."""

    def __init__(self):
        super().__init__("http://prom", None, None, None, "ns", lambda path: "")
        self.clock = 0.0
        self.queries = []

    def prometheus_value(self, query):
        self.queries.append(query)
        return 2.0 if self.clock >= 4 else None

    def slurm_fenced(self, node):
        return None

    def kube_fenced(self, node):
        return None

    def job(self, job_id):
        return None


REQUEST = {"nodes": ["n1"], "experiment": "gpu_xid", "injected_at": 0.0, "poll_s": 1.0,
           "deadlines": {"detected": 60, "alerted": 60, "scheduler": 60, "recovered": 60},
           "expectations": {"detection": None, "alerts": [], "fences": True, "requeues": False},
           "brakes": [brakes.Brake("others", "count(bad{node!~\"$targets\"})", above=1.0, for_s=2.0)]}


@pytest.mark.parametrize("sliced", [False, True])
def test_a_breached_brake_aborts_the_watch_and_says_which(sliced):
    probes = Probes()

    def sleep(seconds):
        probes.clock += seconds

    carry = None
    while True:
        seen = observe.observe(REQUEST, probes, clock=lambda: probes.clock, sleep=sleep, carry=carry,
                               until=probes.clock + 1.5 if sliced else None)
        if seen["done"]:
            break
        carry = json.loads(json.dumps(seen["carry"]))  # through Ansible: plain data, the breach's start kept
    assert seen["aborted"] == 'abort condition others breached: count(bad{node!~"n1"}) = 2, above 1 for 2 s'
    assert probes.clock == 6.0  # bad from 4 s, held 2 s: the watch did not wait for its 60 s deadlines
    assert [e["name"] for e in seen["events"]][-1] == "abort"
    assert {s["verdict"] for s in seen["steps"] if s["step"] in ("alerted", "scheduler")} == {"fail"}
