# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The network family and its eBPF observer without a kernel: input checks (FieldError names the
field), names within the kernel's limits, tc and nft command lines, the plan with and without netem,
the capability shortfalls, and the parsers of tc, nft and bpftrace output (real output of this lab's
tools). tests/integration/chaos/test_network_chaos.py does it all on real namespaces."""

from __future__ import annotations

import json
from typing import Any, Dict

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import ebpf, experiments, network
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

ALL_CAPS = {"root": True, "tc": True, "nft": True, "ip": True, "netem": True, "tbf": True}
NO_NETEM = dict(ALL_CAPS, netem=False)


def spec(lab: bool = True, **params: Any) -> Dict[str, Any]:
    return {"experiment": "net_degrade", "node": "gpu-a-001", "fault_id": "f-20261130-000000-ab12-gpu-a-001",
            "params": params, "lab_dir": "/var/tmp/lab" if lab else None}


@pytest.fixture
def caps(monkeypatch):
    """Our own capability probe, set per test (the real one runs tc in a namespace)."""
    def use(found, ebpf_missing=None):
        monkeypatch.setattr(network, "_capabilities", dict(found))
        monkeypatch.setattr(ebpf, "missing", lambda bpftrace=None: ebpf_missing)
    return use


# -- validation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("params, field", [
    ({"delay_ms": -1}, "params.delay_ms"),
    ({"delay_ms": "50ms"}, "params.delay_ms"),
    ({"loss_percent": 101}, "params.loss_percent"),
    ({"loss_percent": True}, "params.loss_percent"),
    ({"rate_mbit": 0}, "params.rate_mbit"),
    ({"rate_mbit": 10, "measure_s": 0}, "params.measure_s"),
    ({"rate_mbit": 10, "observe": "yes"}, "params.observe"),
    ({"rate_mbit": 10, "interface": "eth0; reboot"}, "params.interface"),
    ({"rate_mbit": 10, "interface": "a-name-that-is-too-long"}, "params.interface"),
    ({"rate_mbit": 10, "jitter_ms": 5}, "params.jitter_ms"),
    ({}, "params.delay_ms"),
    ({"delay_ms": 0, "loss_percent": 0}, "params.delay_ms"),
])
def test_bad_params_name_the_field(params, field):
    with pytest.raises(FieldError) as error:
        network.check_params(spec(**params))
    assert error.value.field == field


def test_a_real_site_must_name_its_interface():
    with pytest.raises(FieldError) as error:
        network.check_params(spec(lab=False, rate_mbit=10))
    assert error.value.field == "params.interface"
    assert network.check_params(spec(lab=False, rate_mbit=10, interface="ib0"))["interface"] == "ib0"


def test_wrong_experiment_and_fault_id():
    with pytest.raises(FieldError) as error:
        network.check_params(dict(spec(rate_mbit=1), experiment="gpu_xid"))
    assert error.value.field == "experiment"
    with pytest.raises(FieldError) as error:
        network.fault_id({"fault_id": "../etc"})
    assert error.value.field == "fault_id"


def test_defaults_and_the_registry():
    experiment = experiments.get("net_degrade")
    assert experiment.family == "network"
    params = network.check_params(spec(**experiment.params))
    assert params == {"delay_ms": 50.0, "loss_percent": 5.0, "rate_mbit": 10.0, "observe": True, "measure_s": 1.5}
    assert experiments.loop_expectations(experiment, params)["detection"] is None


# -- names and command lines -----------------------------------------------------------------------
def test_names_fit_the_kernel_and_carry_the_fault():
    name = network.names("f-20261130-000000-ab12-a-very-long-node-name-0001")
    assert len(name["veth_a"]) <= 15 and len(name["veth_b"]) <= 15
    assert name["veth_a"] != name["veth_b"] and name["tag"] in name["veth_a"] and name["tag"] in name["table"]
    assert name["ns_a"] == "gpf-f-20261130-000000-ab12-a-very-long-node-name-0001-a"
    assert network.names("f-1") == network.names("f-1") != network.names("f-2")


def test_qdisc_with_and_without_netem():
    params = {"delay_ms": 50.0, "rate_mbit": 10.0}
    assert network.qdisc_argv("ib0", params, netem=True) == [
        "tc", "qdisc", "add", "dev", "ib0", "root", "handle", "7a47:", "netem", "delay", "50ms", "rate", "10mbit"]
    tbf = network.qdisc_argv("ib0", params, netem=False)
    assert tbf[:9] == ["tc", "qdisc", "add", "dev", "ib0", "root", "handle", "7a47:", "tbf"]
    assert tbf[9:11] == ["rate", "10mbit"] and int(tbf[12]) >= 65536
    assert network.qdisc_argv("ib0", {"delay_ms": 50.0}, netem=False) is None
    assert network.qdisc_argv("ib0", {"loss_percent": 5.0}, netem=True) is None
    assert network.in_ns("ns1", ["tc", "x"]) == ["ip", "netns", "exec", "ns1", "tc", "x"]
    assert network.in_ns(None, ["tc", "x"]) == ["tc", "x"]


def test_nft_ruleset_drops_a_share_of_the_interface_egress():
    text = network.nft_ruleset("gpufleet_chaos_ab12cd34", "ib0", 2.5)
    assert "table inet gpufleet_chaos_ab12cd34 {" in text
    assert "type filter hook output priority 0; policy accept;" in text
    assert 'oifname "ib0" numgen random mod 1000 < 25 counter drop' in text


# -- parsers (output of this lab's tc, nft and bpftrace) -------------------------------------------
NFT_JSON = json.dumps({"nftables": [
    {"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
    {"table": {"family": "inet", "name": "gpufleet_chaos_e40db82d", "handle": 1}},
    {"chain": {"family": "inet", "table": "gpufleet_chaos_e40db82d", "name": "egress", "handle": 1,
               "type": "filter", "hook": "output", "prio": 0, "policy": "accept"}},
    {"rule": {"family": "inet", "table": "gpufleet_chaos_e40db82d", "chain": "egress", "handle": 2,
              "comment": "gpufleet chaos", "expr": [
                  {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "gpfe40db82da"}},
                  {"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 1000, "offset": 0}},
                             "right": 50}},
                  {"counter": {"packets": 49, "bytes": 1139228}}, {"drop": None}]}}]})
TC_JSON = ('[{"kind":"tbf","handle":"7a47:","root":true,"refcnt":2,"options":{"rate":1250000,"burst":67050,'
           '"lat":100000}}]')
TC_DEFAULT = '[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]'
BPFTRACE_OUT = """Attaching 2 probes...


@rx_bytes: 53540
@rx_packets: 747
@tx_bytes: 2801690
@tx_packets: 745
"""


def test_parse_nft_counter():
    assert network.parse_nft_counter(NFT_JSON) == {"packets": 49, "bytes": 1139228}
    assert network.parse_nft_counter("") == {"packets": 0, "bytes": 0}
    assert network.parse_nft_counter("not json") == {"packets": 0, "bytes": 0}


def test_root_qdisc_and_what_is_default():
    assert network.root_qdisc(TC_JSON)["handle"] == network.HANDLE
    assert not network.default_root(network.root_qdisc(TC_JSON))
    assert network.default_root(network.root_qdisc(TC_DEFAULT))
    assert network.default_root(None) and network.root_qdisc("garbage") is None


def test_unknown_qdisc_kind_and_rate():
    assert network.unknown_kind("Error: Specified qdisc kind is unknown.")
    assert not network.unknown_kind("RTNETLINK answers: File exists")
    assert network.mbit(1250000, 1.0) == 10.0 and network.mbit(5, 0) == 0.0


def test_parse_bpftrace_counts():
    assert ebpf.parse_counts(BPFTRACE_OUT) == {"tx_packets": 745, "tx_bytes": 2801690, "rx_packets": 747,
                                               "rx_bytes": 53540}
    # No packet on a side: bpftrace never printed that map.
    assert ebpf.parse_counts("Attaching 2 probes...\n\n@tx_packets: 3\n@tx_bytes: 180\n") == {
        "tx_packets": 3, "tx_bytes": 180, "rx_packets": 0, "rx_bytes": 0}
    assert ebpf.attached("Attaching 2 probes...\n") and not ebpf.attached("")


def test_bpftrace_refusal_drops_the_memlock_warning():
    stderr = ("ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace. If your program is not loading, "
              "you can try \"ulimit -l 8192\" to fix the problem\nERROR: Could not resolve symbol: /proc/self/exe\n")
    assert ebpf.refusal(stderr) == "ERROR: Could not resolve symbol: /proc/self/exe"
    assert ebpf.refusal("") == "bpftrace exited without a reason"


def test_observer_identity_survives_pid_reuse():
    stat = "7942 (bpftrace) S 1 7942 7942 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 3 0 4891996 0 0"
    assert ebpf.proc_start_time(stat) == "4891996"
    odd = "7942 (a (b) c) S 1 7942 7942 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 3 0 4891996 0 0"
    assert ebpf.proc_start_time(odd) == "4891996"
    script = "/run/gpufleet-chaos/e40db82d.bpftrace.bt"
    assert ebpf.same_process(stat, "bpftrace %s gpfe40db82da" % script, "4891996", script)
    assert not ebpf.same_process(stat, "bpftrace %s gpfe40db82da" % script, "1", script)
    assert not ebpf.same_process(stat, "sleep 100", "4891996", script)
    assert "str($1)" in ebpf.PROGRAM and "net_dev_xmit" in ebpf.PROGRAM and "netif_receive_skb" in ebpf.PROGRAM


# -- plan and shortfalls -----------------------------------------------------------------------------
def test_plan_without_netem_reports_the_delay_and_runs_the_rest(caps):
    caps(NO_NETEM)
    plan = network.plan(spec(delay_ms=50, loss_percent=5, rate_mbit=10))
    assert plan["missing"] == []
    assert plan["not_injected"] == ["delay_ms=50: needs the netem qdisc, which this kernel lacks (Specified qdisc "
                                    "kind is unknown): not injected"]
    text = "\n".join(plan["actions"])
    assert "tbf rate 10mbit" in text and "netem" not in text
    assert "drop 5% of the packets leaving" in text and "bpftrace" in text and "ip netns add" in text


def test_plan_with_netem_delays_and_limits_with_it(caps):
    caps(ALL_CAPS)
    plan = network.plan(spec(lab=False, interface="ib0", delay_ms=50, rate_mbit=10))
    assert plan["not_injected"] == [] and plan["missing"] == []
    text = "\n".join(plan["actions"])
    assert "tc qdisc add dev ib0 root handle 7a47: netem delay 50ms rate 10mbit (ib0)" in text
    assert "netns" not in text


def test_only_delay_without_netem_is_missing_and_refused(caps):
    caps(NO_NETEM)
    plan = network.plan(spec(delay_ms=50))
    assert plan["missing"] == ["net_degrade: nothing asked for can be injected here (delay_ms)"]


def test_shortfalls(caps):
    caps(ALL_CAPS, ebpf_missing="bpftrace is not installed (Debian/Ubuntu: bpftrace)")
    gaps = network.shortfalls({"loss_percent": 5, "observe": True}, dict(ALL_CAPS, nft=False, root=False))
    assert gaps["missing"][0].startswith("root:")
    assert "loss_percent=5: needs nftables" in gaps["not_injected"][0]
    assert gaps["not_injected"][1] == "eBPF observation: bpftrace is not installed (Debian/Ubuntu: bpftrace): " \
                                      "not observed"
    assert network.shortfalls({"rate_mbit": 1, "observe": False}, ALL_CAPS) == {"missing": [], "not_injected": []}


def test_check_mode_changes_nothing(caps):
    caps(NO_NETEM)
    undo = network.inject(spec(loss_percent=5, rate_mbit=10), FaultContext.of(check_mode=True))
    assert undo["check_mode"] and undo["applied"] == [] and "observer" not in undo
    reverted = network.revert(dict(spec(), **undo), FaultContext.of(check_mode=True))
    assert reverted == {"reverted": [], "already": False, "check_mode": True}


# -- the report --------------------------------------------------------------------------------------
def test_the_report_carries_what_was_not_injected_and_what_was_observed():
    import jsonschema

    from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import scoring
    from ansible_collections.gpufleet.resilience.plugins.module_utils.report import document

    skipped = "delay_ms=50: needs the netem qdisc, which this kernel lacks (...): not injected"
    drill = {"id": "d-20261130-000000-ab12", "experiment": "net_degrade", "family": "network", "targets": ["n1"],
             "started_at": 1.0, "not_injected": [skipped]}
    fault = {"id": "f-1", "node": "n1", "rollback": "done", "actions": ["ip netns del gpf-f-1-a"],
             "observed": {"ebpf": {"tx_packets": 745, "tx_bytes": 2801690, "rx_packets": 747, "rx_bytes": 53540},
                          "throughput_mbit": {"before_mbit": 7785.2, "during_mbit": 8.3}, "not_injected": [skipped]}}
    doc = scoring.document(drill, [], {}, [fault], 2.0)
    jsonschema.Draft202012Validator(document.DRILL_SCHEMA).validate(doc)
    assert document.check(doc)["not_injected"] == [skipped]
    assert "not injected (missing capability): " + skipped in doc["findings"]
    (row,) = document.fault_rows(doc)
    assert row[-1] == ("ip netns del gpf-f-1-a; observed ebpf: rx_bytes=53540, rx_packets=747, tx_bytes=2801690, "
                       "tx_packets=745; observed throughput_mbit: before_mbit=7785.2, during_mbit=8.3")
    with pytest.raises(FieldError) as error:
        document.check(dict(doc, not_injected="delay"))
    assert error.value.field == "not_injected"
