# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""A fault that acts on the node's own host runs there (issue 16, finding 4, docs/chaos.md "Where a
fault runs"): inject refuses on any other host with nothing written, the ledger records the host,
a rollback, the watchdog and the kill switch elsewhere leave it alone, and the lab is unchanged."""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api, experiments, ledger
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError


class FileFamily:
    """A family that changes a file where it runs, as nccl_env or kmsg do."""

    def __init__(self, root):
        self.root = root

    def marker(self, node):
        return os.path.join(self.root, "fault-%s" % node)

    def plan(self, spec):
        return {"actions": ["write %s" % self.marker(spec["node"])]}

    def inject(self, spec, ctx):
        with open(self.marker(spec["node"]), "w") as handle:
            handle.write(spec["fault_id"])
        return {"marker": self.marker(spec["node"])}

    def revert(self, undo, ctx):
        os.unlink(undo["marker"])
        return {"reverted": ["removed %s" % undo["marker"]], "observed": {"drops": 7}}


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A real site without Kubernetes: a ledger file, a file-writing family for net_degrade (a host
    fault) and cpu_saturation (a Slurm job: an API fault), and a settable host name."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    family = FileFamily(str(tmp_path))
    real = api.family_module
    monkeypatch.setattr(api, "family_module", lambda name: family if name in ("network", "numa") else real(name))
    host = {"name": "ctl01", "fqdn": "ctl01.example.com"}
    monkeypatch.setattr(api.socket, "gethostname", lambda: host["name"])
    monkeypatch.setattr(api.socket, "getfqdn", lambda *a: host["fqdn"])

    def on(name, fqdn=None):
        host.update(name=name, fqdn=fqdn or name + ".example.com")

    # The gate's registration, which an injection needs (a drill that is no longer registered is refused).
    store = ledger.FileStore(str(tmp_path / "ledger.json"))
    store.update(lambda data: (ledger.add_drill(data, {"id": drill()["id"], "targets": ["gpu-a-003", "gpu-a-004"],
                                                       "expires_at": 4102444800.0}), None))
    return {"ledger_file": str(tmp_path / "ledger.json"), "family": family, "on": on}


def drill(experiment="net_degrade", family="network", target="gpu-a-003", **params):
    return {"id": "d-20261201-000000-abcd", "experiment": experiment, "family": family, "targets": [target],
            "duration": 600, "params": params, "backend": "default"}


def ledger_faults(site):
    if not os.path.exists(site["ledger_file"]):
        return {}
    with open(site["ledger_file"]) as handle:
        return ledger.faults(json.load(handle))


def test_a_host_fault_on_another_host_is_refused_naming_target_and_nothing_is_written(site):
    with pytest.raises(FieldError) as refused:
        api.inject({"drill": drill(), "ledger_file": site["ledger_file"]}, check_mode=False)
    assert refused.value.field == "target"
    assert "gpu-a-003" in str(refused.value) and "ctl01" in str(refused.value)
    assert "nothing was injected" in str(refused.value)
    assert not os.path.exists(site["family"].marker("gpu-a-003"))
    assert ledger_faults(site) == {}


def test_a_node_name_that_is_not_the_target_is_refused_too(site):
    site["on"]("gpu-a-003")  # the host is named like the target, but the site says it is another node
    with pytest.raises(FieldError) as refused:
        api.inject({"drill": drill(), "ledger_file": site["ledger_file"], "node_name": "gpu-a-004"}, False)
    assert refused.value.field == "target"
    assert not os.path.exists(site["family"].marker("gpu-a-003"))


@pytest.mark.parametrize("hostname,fqdn,node_name", [
    ("gpu-a-003", "gpu-a-003.site.example", None),  # the short name
    ("gpu-a-003.site.example", "gpu-a-003.site.example", None),  # a host whose hostname is its FQDN
    ("h17", "h17.site.example", "gpu-a-003"),  # the site's chaos_drill_node_name
])
def test_on_the_target_it_injects_and_the_ledger_records_the_host(site, hostname, fqdn, node_name):
    site["on"](hostname, fqdn)
    params = {"drill": drill(), "ledger_file": site["ledger_file"], "node_name": node_name}
    result = api.inject(params, check_mode=False)
    assert os.path.exists(site["family"].marker("gpu-a-003"))
    entry = ledger_faults(site)["f-20261201-000000-abcd-gpu-a-003"]
    assert entry["host"] == hostname and entry["on_host"] is True and entry["state"] == "active"
    assert result["faults"][0]["host"] == hostname
    assert result["phase"]["detail"]["faults"][0]["host"] == hostname


def test_a_revert_on_another_host_refuses_naming_the_host_and_keeps_the_fault(site):
    site["on"]("gpu-a-003")
    api.inject({"drill": drill(), "ledger_file": site["ledger_file"]}, check_mode=False)
    site["on"]("ctl01")

    result = api.rollback({"drill_id": "d-20261201-000000-abcd", "ledger_file": site["ledger_file"]}, False)
    [row] = result["faults"]
    assert row["rollback"] == "refused" and not result["ok"]
    assert "gpu-a-003" in row["error"] and "roll it back there" in row["error"]
    assert os.path.exists(site["family"].marker("gpu-a-003"))  # this host's files are not touched
    entry = ledger_faults(site)["f-20261201-000000-abcd-gpu-a-003"]
    assert entry["state"] == "active" and "error" not in entry  # as it was, not "rollback_failed"

    # The kill switch on the controller: on, the fault listed as refused with its host, still in the ledger.
    stopped = api.ledger_state({"state": "stopped", "ledger_file": site["ledger_file"]}, False)
    assert [(r["rollback"], r["host"]) for r in stopped["rolled_back"]] == [("refused", "gpu-a-003")]
    assert [f["id"] for f in stopped["faults"]] == ["f-20261201-000000-abcd-gpu-a-003"]
    assert stopped["kill_switch"]["on"]

    # What chaos-stop.yml then delegates to that host: this fault's rollback, there.
    site["on"]("gpu-a-003")
    there = api.rollback({"fault_id": "f-20261201-000000-abcd-gpu-a-003", "how": "kill_switch",
                          "ledger_file": site["ledger_file"]}, False)
    assert [r["rollback"] for r in there["faults"]] == ["done"] and there["ok"]
    assert not os.path.exists(site["family"].marker("gpu-a-003"))
    with open(site["ledger_file"]) as handle:
        data = json.load(handle)
    assert ledger.faults(data) == {}
    assert [(h["host"], h["rolled_back_by"]) for h in ledger.history(data)] == [("gpu-a-003", "kill_switch")]


def test_the_controllers_rollback_reports_what_the_hosts_rollback_did_and_saw(site):
    """The role rolls a host fault back on its host, then collects the drill's faults on the controller:
    the report's row comes from the ledger's history, with the host and what the family observed."""
    site["on"]("gpu-a-003")
    api.inject({"drill": drill(), "ledger_file": site["ledger_file"]}, check_mode=False)
    there = api.rollback({"drill_id": "d-20261201-000000-abcd", "ledger_file": site["ledger_file"]}, False)
    assert there["faults"][0]["observed"] == {"drops": 7} and there["changed"]
    site["on"]("ctl01")
    here = api.rollback({"drill_id": "d-20261201-000000-abcd", "ledger_file": site["ledger_file"]}, False)
    [row] = here["faults"]
    assert (row["rollback"], row["host"], row["observed"]) == ("done", "gpu-a-003", {"drops": 7})
    assert here["ok"] and not here["changed"]


def test_the_watchdog_on_another_host_leaves_the_fault_to_its_own_host(site):
    site["on"]("gpu-a-003")
    api.inject({"drill": drill(), "ledger_file": site["ledger_file"], "duration": 0.001}, check_mode=False)
    store = ledger.FileStore(site["ledger_file"])

    def later():  # past the expiry, however fast the machine (the look may come within its 1 ms)
        return time.time() + 1.0

    site["on"]("ctl01")
    assert api.watch_expiry(store, FaultContext(), None, False, lambda s: None, clock=later) == []
    assert os.path.exists(site["family"].marker("gpu-a-003"))
    assert ledger_faults(site)["f-20261201-000000-abcd-gpu-a-003"]["state"] == "active"
    site["on"]("gpu-a-003")
    [row] = api.watch_expiry(store, FaultContext(), None, False, lambda s: None, clock=later)
    assert row["rollback"] == "done" and not os.path.exists(site["family"].marker("gpu-a-003"))


def test_the_lab_is_unchanged_every_lab_node_lives_on_the_one_machine(site, tmp_path):
    lab = {"drill": drill(), "ledger_file": site["ledger_file"], "lab_dir": str(tmp_path / "lab")}
    api.inject(lab, check_mode=False)  # on ctl01, for the lab node gpu-a-003
    assert os.path.exists(site["family"].marker("gpu-a-003"))
    site["on"]("elsewhere")
    result = api.rollback({"drill_id": "d-20261201-000000-abcd", "ledger_file": site["ledger_file"]}, False)
    assert [r["rollback"] for r in result["faults"]] == ["done"]
    assert not os.path.exists(site["family"].marker("gpu-a-003"))


def test_a_fault_through_an_api_runs_from_the_controller(site):
    # cpu_saturation sends a Slurm job to the node: nothing on the controller changes.
    api_drill = drill("cpu_saturation", "numa", via="slurm")
    api.inject({"drill": api_drill, "ledger_file": site["ledger_file"]}, check_mode=False)
    assert ledger_faults(site)["f-20261201-000000-abcd-gpu-a-003"]["on_host"] is False
    site["on"]("ctl02")
    result = api.rollback({"drill_id": api_drill["id"], "ledger_file": site["ledger_file"]}, False)
    assert [r["rollback"] for r in result["faults"]] == ["done"]
    # The same load started as a process acts on the host: refused off the target.
    with pytest.raises(FieldError, match="target"):
        api.inject({"drill": drill("cpu_saturation", "numa", via="process"), "ledger_file": site["ledger_file"]},
                   False)


def test_inject_only_the_targets_named_in_nodes(site):
    two = dict(drill(), targets=["gpu-a-003", "gpu-a-004"])
    site["on"]("gpu-a-004")
    result = api.inject({"drill": two, "nodes": ["gpu-a-004"], "ledger_file": site["ledger_file"]}, False)
    assert [f["node"] for f in result["faults"]] == ["gpu-a-004"]
    with pytest.raises(FieldError) as refused:
        api.inject({"drill": two, "nodes": ["gpu-b-001"], "ledger_file": site["ledger_file"]}, False)
    assert refused.value.field == "nodes"


@pytest.mark.parametrize("name,params,on_host", [
    ("gpu_xid", {}, True), ("gpu_thermal", {}, True), ("checkpoint_fill", {}, True),
    ("checkpoint_storage", {}, True), ("nccl_env", {}, True), ("net_degrade", {}, True),
    ("checkpoint_kill", {}, False), ("gpu_burn", {}, False), ("cpu_saturation", {"via": "slurm"}, False),
    ("numa_remote_memory", {"via": "process"}, True),
    ("numa_memory_pressure", {"topology_manager_policy": "single-numa-node"}, True),
])
def test_each_experiment_says_whether_it_acts_on_the_nodes_host(name, params, on_host):
    assert experiments.acts_on_host(experiments.get(name), params) is on_host


def test_the_gate_tells_the_role_where_the_fault_runs(bare_metal):
    gated = api.drill_gate(dict(bare_metal, experiment="gpu_thermal"), check_mode=True)
    assert gated["drill"]["on_host"] is True
    gated = api.drill_gate(dict(bare_metal, experiment="checkpoint_kill", protected_job="42"), check_mode=True)
    assert gated["drill"]["on_host"] is False


def test_an_injection_after_its_drill_was_ended_is_refused_and_writes_nothing(site):
    """Its watchdog (or the warden) ended the drill at its expiry before anything was injected, or the
    kill switch did: the injection is refused, naming the drill, and nothing is injected or recorded."""
    site["on"]("gpu-a-003")
    store = ledger.FileStore(site["ledger_file"])
    store.update(lambda data: (ledger.remove_drill(data, drill()["id"]), None))
    with pytest.raises(api.DrillRefused) as refused:
        api.inject({"drill": drill(), "ledger_file": site["ledger_file"]}, check_mode=False)
    assert refused.value.field == "drill" and "no longer in the chaos ledger" in str(refused.value)
    assert not os.path.exists(site["family"].marker("gpu-a-003"))
    assert ledger_faults(site) == {}
