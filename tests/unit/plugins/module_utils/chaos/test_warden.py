"""The chaos warden's sweep, on the ledger's file store, with a family of our own that records its reverts."""

from __future__ import annotations

import threading

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import api, ledger, warden
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError


class RecordingFamily:
    def __init__(self):
        self.reverted = []

    def revert(self, undo, ctx):
        self.reverted.append(undo["what"])
        return {"reverted": ["put back %s" % undo["what"]]}


@pytest.fixture()
def family(monkeypatch):
    recording = RecordingFamily()
    real = api.family_module
    monkeypatch.setattr(api, "family_module", lambda name: recording if name == "recording" else real(name))
    return recording


def fault(fault_id, drill, expires_at, **more):
    return dict({"id": fault_id, "drill": drill, "family": "recording", "node": "gpu-a-001", "state": "active",
                 "spec": {"lab_dir": "/lab"}, "undo": {"what": fault_id}, "expires_at": expires_at}, **more)


def store_with(tmp_path, faults, drills):
    store = ledger.FileStore(str(tmp_path / "ledger.json"))
    data = {}
    for entry in faults:
        data = ledger._put(data, "faults", dict(ledger.faults(data), **{entry["id"]: entry}))
    for drill in drills:
        data = ledger.add_drill(data, drill)
    store.update(lambda _old: (data, None))
    return store


def test_a_sweep_rolls_back_what_expired_past_the_grace_and_ends_the_drills_left_empty(tmp_path, family):
    now = 1000.0
    store = store_with(tmp_path, [fault("old", "d1", now - 30), fault("in-grace", "d2", now - 5),
                                  fault("live", "d3", now + 300)],
                       [{"id": "d1", "expires_at": now - 30}, {"id": "d2", "expires_at": now - 5},
                        {"id": "d3", "expires_at": now + 300}, {"id": "d4", "expires_at": now - 60}])
    done = warden.sweep(store, FaultContext(), now, grace=10)
    assert family.reverted == ["old"]  # the one in its grace is left to its own drill's watchdog
    assert [row["id"] for row in done["rolled_back"]] == ["old"] and done["rolled_back"][0]["rollback"] == "done"
    assert sorted(done["drills_ended"]) == ["d1", "d4"]  # d2 keeps its fault for now; d3 has not expired
    data, _version = store.read()
    assert sorted(ledger.faults(data)) == ["in-grace", "live"]
    assert sorted(ledger.drills(data)) == ["d2", "d3"]
    assert [(h["id"], h["rolled_back_by"]) for h in ledger.history(data)] == [("old", "warden")]
    # Nothing left to do: a second sweep at the same time changes nothing.
    assert warden.sweep(store, FaultContext(), now, grace=10) == {"rolled_back": [], "drills_ended": []}


def test_a_fault_that_acts_on_another_host_is_left_to_that_hosts_warden(tmp_path, family):
    now = 1000.0
    elsewhere = fault("remote", "d1", now - 60, spec={}, on_host=True, host="gpu-host-that-is-not-here.invalid")
    store = store_with(tmp_path, [elsewhere], [])
    assert warden.sweep(store, FaultContext(), now, grace=0)["rolled_back"] == []
    assert family.reverted == []


def test_a_failed_sweep_is_logged_and_the_warden_goes_on(tmp_path, monkeypatch):
    calls = []
    stop = threading.Event()

    def failing_sweep(*_args):
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        raise api.GpufleetError("the API server is away")

    monkeypatch.setattr(warden, "sweep", failing_sweep)
    logged = []
    warden.run({"ledger_file": str(tmp_path / "l.json")}, 0.01, 0, stop, logged.append)
    assert len(calls) == 2 and [r["event"] for r in logged] == ["sweep_failed", "sweep_failed"]


@pytest.mark.parametrize("interval, grace, field", [(0, 1, "interval"), (-1, 1, "interval"),
                                                    (float("nan"), 1, "interval"), (5, -1, "grace"),
                                                    (5, 4000, "grace")])
def test_bad_settings_name_their_field(tmp_path, interval, grace, field):
    with pytest.raises(FieldError) as error:
        warden.run({"ledger_file": str(tmp_path / "l.json")}, interval, grace, threading.Event(), print)
    assert error.value.field == field


def test_once_sweeps_once_and_exits_0(tmp_path, capsys):
    assert warden.main(["--ledger-file", str(tmp_path / "l.json"), "--once"]) == 0
    events = capsys.readouterr().out.splitlines()
    assert '"event": "started"' in events[0] and '"event": "stopped"' in events[-1]


@pytest.mark.parametrize("settings, field", [
    ('{"slurm_api": "rest", "rest_url": "https://slurm:6820", "jwt_key": "/k"}', "slurm_settings"),
    ("not json", "slurm_settings"),
    # The secret is read at start-up: a missing key file is named before any sweep.
    ('{"slurm_api": "rest", "rest_url": "https://slurm:6820", "rest_jwt_key_file": "/nonexistent/jwt.key"}',
     "rest_jwt_key_file"),
    ('{"slurm_api": "rest", "rest_jwt_key_file": "/nonexistent/jwt.key"}', "rest_url"),
])
def test_bad_slurm_settings_are_refused_at_start_naming_the_field(tmp_path, capsys, settings, field):
    assert warden.main(["--ledger-file", str(tmp_path / "l.json"), "--slurm-settings", settings, "--once"]) == 2
    refused = [line for line in capsys.readouterr().out.splitlines() if '"event": "refused"' in line]
    assert refused and '"field": "%s"' % field in refused[0], refused


class FlakyStore:
    """The ledger's file store behind an API server that fails the first ``fail`` reads."""

    def __init__(self, store, fail):
        self.store, self.fail = store, fail

    def read(self):
        if self.fail:
            self.fail -= 1
            raise api.GpufleetError("Kubernetes API server https://127.0.0.1:6443: read timed out")
        return self.store.read()

    def update(self, change, write=True):
        return self.store.update(change, write)


def test_the_watchdog_outlives_failed_looks_and_rolls_back_at_expiry(tmp_path, family):
    """Under load a look at the ledger may time out: the watchdog notes it and looks again, rather
    than end and leave the fault to the warden's grace."""
    clock = [1000.0]
    store = FlakyStore(store_with(tmp_path, [fault("f1", "d1", 1010.0)], [{"id": "d1", "expires_at": 1010.0}]), 3)
    slept, problems = [], []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds

    rolled = api.watch_expiry(store, FaultContext(), "d1", True, sleep, clock=lambda: clock[0], problems=problems)
    assert [row["id"] for row in rolled] == ["f1"] and family.reverted == ["f1"]
    assert slept[:3] == [api.WATCH_RETRY_S] * 3 and len(problems) == 3 and "read timed out" in problems[0]
    data, _version = store.read()
    assert [(h["id"], h["rolled_back_by"]) for h in ledger.history(data)] == [("f1", "expiry")]
    assert ledger.drills(data) == {}  # the drill ended at its expiry, with its fault gone
    assert 1010.0 <= clock[0] < 1010.0 + 5  # on the first look after its expiry


def test_one_look_without_wait_raises_what_failed(tmp_path, family):
    store = FlakyStore(store_with(tmp_path, [fault("f1", "d1", 900.0)], []), 1)
    with pytest.raises(api.GpufleetError, match="read timed out"):
        api.watch_expiry(store, FaultContext(), None, False, lambda s: None)
    assert family.reverted == []


def test_a_drill_slow_to_inject_is_kept_and_its_fault_expires_with_it(tmp_path, family):
    """The gate registers a drill for duration + INJECT_WITHIN_S; its watchdog looks at gate + duration
    and must not end it (a steady-state check slower than the duration, on a loaded machine). The
    injection then sets the drill's expiry to its fault's, and the watchdog rolls the fault back then."""
    gated, duration = 1000.0, 25.0
    store = store_with(tmp_path, [], [{"id": "d1", "expires_at": gated + duration + api.INJECT_WITHIN_S}])
    assert not api.update_if(store, lambda d: ledger.end_if_empty(d, "d1", gated + duration + 1))
    assert warden.sweep(store, FaultContext(), gated + duration + 11, grace=10)["drills_ended"] == []
    injected = gated + 40  # after the duration had passed since the gate
    entry = fault("f1", "d1", injected + duration)
    entry.pop("state")
    assert api.update_if(store, lambda d: ledger.add_drill_fault(d, entry))
    data, _version = store.read()
    assert ledger.drills(data)["d1"]["expires_at"] == injected + duration  # the allowance is spent
    assert ledger.faults(data)["f1"]["state"] == "injecting"
    # A second target's fault, injected a moment later, keeps the drill until its own expiry.
    second = dict(entry, id="f2", expires_at=injected + 1 + duration)
    assert api.update_if(store, lambda d: ledger.add_drill_fault(d, second))
    assert ledger.drills(store.read()[0])["d1"]["expires_at"] == injected + 1 + duration
    # The drill has faults: neither an expired look nor the warden ends it under them.
    assert not api.update_if(store, lambda d: ledger.end_if_empty(d, "d1", injected + 2 * duration))
    assert warden.sweep(store, FaultContext(), injected + 5, grace=10) == {"rolled_back": [], "drills_ended": []}


def test_an_injection_for_a_drill_no_longer_registered_writes_nothing(tmp_path):
    store = store_with(tmp_path, [], [{"id": "d1", "expires_at": 900.0}])
    assert api.update_if(store, lambda d: ledger.end_if_empty(d, "d1", 1000.0))  # ended at its expiry
    assert not api.update_if(store, lambda d: ledger.add_drill_fault(d, fault("f1", "d1", 1100.0)))
    data, _version = store.read()
    assert ledger.faults(data) == {} and ledger.drills(data) == {}
