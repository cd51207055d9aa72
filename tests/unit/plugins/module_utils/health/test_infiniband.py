# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""InfiniBand port health: the sysfs reader, the judge's windows (explicit ``now``, no sleeping),
the verdict and the metrics."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import infiniband as ib
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_ib

UP = {"state": "ACTIVE", "state_code": 4, "phys_state": "LinkUp", "phys_state_code": 5}
DOWN = {"state": "DOWN", "state_code": 1, "phys_state": "Disabled", "phys_state_code": 3}


def port(up: bool = True, hca: str = "mlx5_0", number: int = 1, **counters: int) -> ib.IbPort:
    return ib.IbPort(hca=hca, port=number, rate_gbps=400.0, link_layer="InfiniBand", counters=counters,
                     **(UP if up else DOWN))


def kinds(findings):
    return [(f.hca, f.port, f.kind) for f in findings]


# ---------------------------------------------------------------- reader


def test_a_node_without_infiniband_has_no_port(tmp_path: Path) -> None:
    assert ib.read_ports(str(tmp_path)) == []


def test_a_light_reading_carries_a_port_whose_states_did_not_change(tmp_path: Path) -> None:
    root = str(tmp_path)
    fake_ib.create_tree(root, ["mlx5_0", "mlx5_1"])
    first = {p.name: p for p in ib.read_ports(root)}
    fake_ib.bump_counter(root, "mlx5_0", 1, "symbol_error", 5)
    light = ib.read_ports(root, carry=first)
    assert light[0] is first["mlx5_0/1"] and light[0].counters["symbol_error"] == 0  # carried, not read
    assert ib.read_ports(root)[0].counters["symbol_error"] == 5  # a full reading sees it
    # A state that changed reads that port in full at once; the other port stays carried.
    fake_ib.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Polling")
    changed, same = ib.read_ports(root, carry=first)
    assert (changed.state, changed.phys_state, changed.counters["symbol_error"]) == ("DOWN", "Polling", 5)
    assert same is first["mlx5_1/1"]


def test_a_light_reading_reads_in_full_a_port_that_was_unreadable_or_is_new(tmp_path: Path) -> None:
    root = str(tmp_path)
    fake_ib.create_tree(root, ["mlx5_0"])
    broken = ib.IbPort(hca="mlx5_0", port=1, state="ACTIVE", state_code=4, phys_state="LinkUp", phys_state_code=5,
                       error="rate: cannot read")
    fake_ib.bump_counter(root, "mlx5_0", 1, "link_downed", 2)
    (again,) = ib.read_ports(root, carry={"mlx5_0/1": broken})
    assert again.error is None and again.counters["link_downed"] == 2
    fake_ib.create_tree(root, ["mlx5_1"])
    ports = ib.read_ports(root, carry={"mlx5_0/1": again})
    assert ports[0] is again and ports[1].counters == dict.fromkeys(ib.COUNTERS, 0)


def test_reads_a_fake_tree_sorted_by_hca_then_port_number(tmp_path: Path) -> None:
    fake_ib.create_tree(str(tmp_path), {"mlx5_1": 1, "mlx5_0": 11})
    fake_ib.bump_counter(str(tmp_path), "mlx5_0", 2, "symbol_error", 7)
    ports = ib.read_ports(str(tmp_path))
    assert [p.name for p in ports] == ["mlx5_0/%d" % n for n in range(1, 12)] + ["mlx5_1/1"]
    first, second = ports[0], ports[1]
    assert (first.state, first.state_code, first.phys_state, first.phys_state_code) == ("ACTIVE", 4, "LinkUp", 5)
    assert (first.rate_gbps, first.link_layer, first.error, first.up) == (400.0, "InfiniBand", None, True)
    assert first.counters == dict.fromkeys(ib.COUNTERS, 0)
    assert second.counters["symbol_error"] == 7


def test_odd_content_marks_its_own_port_and_the_others_still_read(tmp_path: Path) -> None:
    hca = tmp_path / "class" / "infiniband" / "mlx5_0"
    hca.mkdir(parents=True)
    (hca.parent / ".lock").write_text("")
    (hca.parent / "README").write_text("not an HCA")
    files = {
        # RoCE, no counters directory at all: counters absent, not 0, and no error.
        "ports/1": {"state": "4: ACTIVE\n", "phys_state": "5: LinkUp\n", "rate": "25 Gb/sec (1X EDR)\n",
                    "link_layer": "Ethernet\n"},
        # Malformed state, a broken counter, the others fine.
        "ports/2": {"state": "ACTIVE\n", "phys_state": "7: Phy Test\n", "rate": "2.5 Gb/sec (1X SDR)\n",
                    "link_layer": "InfiniBand\n", "counters/symbol_error": "lots\n", "counters/link_downed": "2\n"},
        # No rate (a link still training) and no link_layer (an old kernel): not errors.
        "ports/3": {"state": "1: DOWN\n", "phys_state": "2: Polling\n"},
        "ports/notaport": {"state": "4: ACTIVE\n"},
    }
    for directory, contents in files.items():
        for name, text in contents.items():
            path = hca / directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    (hca / "ports" / "4" / "state").mkdir(parents=True)  # unreadable as a file
    (hca / "ports" / "4" / "phys_state").write_text("5: LinkUp\n")
    roce, broken, training, unreadable = ib.read_ports(str(tmp_path))
    assert (roce.link_layer, roce.rate_gbps, roce.counters, roce.error, roce.up) == ("Ethernet", 25.0, {}, None, True)
    assert broken.error is not None and "ports/2/state: expected '<code>: <name>'" in broken.error
    assert "ports/2/counters/symbol_error: expected a non-negative integer, got 'lots'" in broken.error
    assert (broken.phys_state, broken.phys_state_code, broken.rate_gbps) == ("Phy Test", 7, 2.5)
    assert broken.counters == {"link_downed": 2} and broken.state_code == 0 and not broken.up
    assert (training.rate_gbps, training.link_layer, training.error, training.up) == (None, "Unknown", None, False)
    assert unreadable.error is not None and "ports/4/state: cannot read" in unreadable.error


@pytest.mark.parametrize("text, gbps", [("400 Gb/sec (4X NDR)", 400.0), ("100 Gb/sec (2X HDR)", 100.0),
                                        ("25 Gb/sec (1X EDR)", 25.0), ("2.5 Gb/sec (1X SDR)", 2.5),
                                        ("10 Gb/sec (4X)\n", 10.0)])
def test_rate_as_the_kernel_writes_it(text: str, gbps: float) -> None:
    assert ib.parse_rate(text) == gbps


@pytest.mark.parametrize("text", ["", "fast", "Gb/sec", "400 Mb/sec"])
def test_a_rate_that_is_not_one(text: str) -> None:
    with pytest.raises(ValueError):
        ib.parse_rate(text)


def test_up_needs_active_and_link_up() -> None:
    assert port().up
    assert not ib.IbPort("mlx5_0", 1, state="ACTIVE", state_code=4, phys_state="LinkErrorRecovery",
                         phys_state_code=6).up
    assert not ib.IbPort("mlx5_0", 1, state="ARMED", state_code=3, phys_state="LinkUp", phys_state_code=5).up


# ---------------------------------------------------------------- judge


def test_a_single_flap_is_neither_down_nor_flapping() -> None:
    watch = ib.IbWatch()
    readings = [(0, port(link_downed=0)), (5, port(up=False, link_downed=1)), (7, port(link_downed=1)),
                (30, port(link_downed=1)), (400, port(link_downed=1))]
    for now, reading in readings:
        assert watch.observe([reading], now) == []


def test_down_for_down_after_s_in_a_row_is_down() -> None:
    watch = ib.IbWatch()
    watch.observe([port()], 0)
    assert watch.observe([port(up=False)], 1) == []
    assert watch.observe([port(up=False)], 10.9) == []
    (finding,) = watch.observe([port(up=False)], 11)
    assert (finding.kind, finding.severity, finding.since) == ("down", "fatal", 1)
    assert finding.detail == "mlx5_0/1 DOWN/Disabled for 10 s"


def test_three_flaps_in_the_window_is_flapping_by_the_counter() -> None:
    watch = ib.IbWatch()
    watch.observe([port(link_downed=5)], 0)  # what happened before the agent started is a baseline
    assert watch.observe([port(link_downed=7)], 100) == []
    (finding,) = watch.observe([port(link_downed=8)], 200)
    assert (finding.kind, finding.severity, finding.detail) == ("flapping", "fatal", "mlx5_0/1 link_downed +3 in 300 s")


def test_three_flaps_seen_as_transitions_without_counters_is_flapping() -> None:
    watch = ib.IbWatch()
    findings = []
    for step in range(7):
        findings = watch.observe([port(up=step % 2 == 0)], step)
    assert kinds(findings) == [("mlx5_0", 1, "flapping")]
    assert findings[0].detail == "mlx5_0/1 went down 3 times in 300 s"


def test_three_flaps_spread_over_more_than_the_window_are_not_flapping() -> None:
    watch = ib.IbWatch()
    downed = 0
    for now in range(0, 1000, 10):
        if now in (100, 300, 500, 700, 900):
            downed += 1
        assert watch.observe([port(link_downed=downed)], now) == [], now


def test_a_counter_rising_above_its_rate_is_degraded() -> None:
    watch = ib.IbWatch()
    watch.observe([port(symbol_error=0, port_rcv_errors=0)], 0)
    assert watch.observe([port(symbol_error=50, port_rcv_errors=0)], 10) == []  # 10/min: not above
    (finding,) = watch.observe([port(symbol_error=225, port_rcv_errors=0)], 20)
    assert (finding.kind, finding.severity) == ("errors_rising", "degraded")
    assert finding.detail == "mlx5_0/1 symbol_error 45/min over 300 s (limit 10/min)"


def test_a_counter_reset_is_a_new_baseline_never_a_negative_rate() -> None:
    watch = ib.IbWatch()
    watch.observe([port(symbol_error=100000)], 0)
    assert watch.observe([port(symbol_error=0)], 10) == []
    assert watch.observe([port(symbol_error=40)], 20) == []
    (finding,) = watch.observe([port(symbol_error=100)], 30)  # rises from the new baseline count
    assert finding.detail == "mlx5_0/1 symbol_error 20/min over 300 s (limit 10/min)"


def test_a_finding_clears_only_after_recover_after_s_up_and_quiet() -> None:
    watch = ib.IbWatch()
    for now in range(0, 15):
        watch.observe([port(up=False)], now)
    (finding,) = watch.observe([port()], 15)
    assert finding.kind == "down" and "(earlier; clears after 60 s up and quiet, 0 s so far)" in finding.detail
    assert kinds(watch.observe([port(up=False)], 40)) == [("mlx5_0", 1, "down")]  # a new flap starts it over
    assert kinds(watch.observe([port()], 41)) == [("mlx5_0", 1, "down")]
    assert kinds(watch.observe([port()], 100.9)) == [("mlx5_0", 1, "down")]
    assert watch.observe([port()], 101) == []


def test_errors_clear_once_the_rate_falls_and_the_port_stays_quiet() -> None:
    watch = ib.IbWatch()
    watch.observe([port(symbol_error=0)], -10)
    for now in range(0, 360, 10):
        assert kinds(watch.observe([port(symbol_error=100)], now)) == [("mlx5_0", 1, "errors_rising")], now
    assert watch.observe([port(symbol_error=100)], 360) == []


def test_recovery_spends_the_flaps_so_flapping_does_not_come_straight_back() -> None:
    watch = ib.IbWatch()
    watch.observe([port(link_downed=0)], 0)
    assert kinds(watch.observe([port(link_downed=3)], 10)) == [("mlx5_0", 1, "flapping")]
    for now in (20, 30, 40, 50, 60, 70, 79.9):  # quiet from the first quiet reading, 20
        assert kinds(watch.observe([port(link_downed=3)], now)) == [("mlx5_0", 1, "flapping")], now
    assert watch.observe([port(link_downed=3)], 80) == []
    assert watch.observe([port(link_downed=3)], 90) == []


def test_a_port_that_disappears_is_missing_until_it_comes_back_and_recovers() -> None:
    watch = ib.IbWatch()
    watch.observe([port(symbol_error=500), port(hca="mlx5_1")], 0)
    (finding,) = watch.observe([port(hca="mlx5_1")], 5)
    assert (finding.hca, finding.kind, finding.severity, finding.since) == ("mlx5_0", "missing", "fatal", 5)
    assert watch.observe([port(hca="mlx5_1")], 25)[0].detail.startswith("mlx5_0/1 missing from sysfs for 20 s")
    # Back after a driver reload: counters from 0 are a new baseline, the finding waits for recovery.
    assert kinds(watch.observe([port(symbol_error=0), port(hca="mlx5_1")], 30)) == [("mlx5_0", 1, "missing")]
    assert kinds(watch.observe([port(symbol_error=3), port(hca="mlx5_1")], 89)) == [("mlx5_0", 1, "missing")]
    assert watch.observe([port(symbol_error=3), port(hca="mlx5_1")], 90) == []


def test_ignored_ports_are_not_judged() -> None:
    watch = ib.IbWatch(ib.IbThresholds(ignore=["mlx5_1", "mlx5_0/2"]))
    watch.observe([port(), port(number=2), port(hca="mlx5_1")], 0)
    assert watch.observe([port(up=False, number=2), port(up=False, hca="mlx5_1", number=2)], 100) == \
        [ib.IbFinding("mlx5_0", 1, "missing", "mlx5_0/1 missing from sysfs for 0 s (HCA off the bus or driver "
                      "unloaded)", 100)]


def test_an_unreadable_port_is_degraded() -> None:
    broken = ib.IbPort("mlx5_0", 1, error="/sys/class/infiniband/mlx5_0/ports/1/state: cannot read: I/O error")
    (finding,) = ib.IbWatch().observe([broken], 0)
    assert (finding.kind, finding.severity) == ("unreadable", "degraded")
    assert finding.detail == "mlx5_0/1 unreadable: " + broken.error


def test_history_stays_bounded() -> None:
    watch = ib.IbWatch()
    for now in range(5000):
        watch.observe([port(symbol_error=now // 7, link_downed=0)], now)
    track = watch._tracks[("mlx5_0", 1)]  # white box: what the windows need, no more
    assert len(track.samples["symbol_error"]) <= 302
    assert len(track.samples["link_downed"]) <= 2


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 120), st.integers(0, 10**6)), min_size=1, max_size=40))
def test_rates_are_never_negative_and_only_name_ports_seen(readings) -> None:
    watch = ib.IbWatch()
    now, history = 0.0, []
    for step, value in readings:
        now += step
        history.append((now, value))
        for finding in watch.observe([port(symbol_error=value)], now):
            assert (finding.hca, finding.port, finding.kind) == ("mlx5_0", 1, "errors_rising")
            if finding.detail.endswith("(limit 10/min)"):  # current, not a remembered one
                rate = float(re.search(r"symbol_error ([\d.]+)/min", finding.detail).group(1))
                # Never more than the rises (not the resets) inside the window can explain.
                rises = sum(max(0, b - a) for (_start, a), (t, b) in itertools.pairwise(history) if t >= now - 300)
                assert 10 <= rate <= rises * 60 / 300 + 0.05  # the detail rounds to 0.1


# ---------------------------------------------------------------- thresholds, verdict, metrics


@pytest.mark.parametrize("settings_, field", [
    ({"down_after_s": -1}, "ib.down_after_s"),
    ({"down_after_s": "soon"}, "ib.down_after_s"),
    ({"flap_count": 0}, "ib.flap_count"),
    ({"flap_count": 2.5}, "ib.flap_count"),
    ({"flap_window_s": 0}, "ib.flap_window_s"),
    ({"error_window_s": math.nan}, "ib.error_window_s"),
    ({"recover_after_s": math.inf}, "ib.recover_after_s"),
    ({"error_rate_per_min": {"crc": 1}}, "ib.error_rate_per_min.crc"),
    ({"error_rate_per_min": {"symbol_error": -1}}, "ib.error_rate_per_min.symbol_error"),
    ({"error_rate_per_min": [1]}, "ib.error_rate_per_min"),
    ({"ignore": "mlx5_0"}, "ib.ignore"),
    ({"ignore": ["mlx5_0/x"]}, "ib.ignore[0]"),
    ({"down_after": 3}, "ib.down_after"),
])
def test_bad_thresholds_name_the_field(settings_, field) -> None:
    with pytest.raises(FieldError) as raised:
        ib.IbThresholds.from_mapping(settings_)
    assert raised.value.field == field


def test_threshold_defaults_and_merged_rates() -> None:
    default = ib.IbThresholds()
    assert (default.down_after_s, default.flap_count, default.flap_window_s, default.error_window_s,
            default.recover_after_s, default.ignore) == (10, 3, 300, 300, 60, frozenset())
    assert dict(default.error_rate_per_min) == ib.DEFAULT_ERROR_RATES
    tuned = ib.IbThresholds.from_mapping({"error_rate_per_min": {"symbol_error": None, "port_xmit_discards": "5"}})
    assert "symbol_error" not in tuned.error_rate_per_min and tuned.error_rate_per_min["port_xmit_discards"] == 5.0
    assert tuned.error_rate_per_min["port_rcv_errors"] == 100.0


def test_ib_verdict_is_worst_first() -> None:
    assert ib.ib_verdict([]) == ("healthy", "")
    rising = ib.IbFinding("mlx5_1", 1, "errors_rising", "mlx5_1/1 symbol_error 45/min", 0)
    assert ib.ib_verdict([rising]) == ("degraded", "mlx5_1/1 symbol_error 45/min")
    down = ib.IbFinding("mlx5_2", 1, "down", "mlx5_2/1 DOWN/Disabled for 12 s", 0)
    assert ib.ib_verdict([rising, down]) == ("fatal", "mlx5_2/1 DOWN/Disabled for 12 s; mlx5_1/1 symbol_error 45/min")
    many = [ib.IbFinding("mlx5_%d" % n, 1, "down", "d%d" % n, 0) for n in range(6)]
    assert ib.ib_verdict(many)[1] == "d0; d1; d2; d3; and 2 more"
    with pytest.raises(FieldError):
        ib.IbFinding("mlx5_0", 1, "sad", "", 0)


def test_port_metrics() -> None:
    roce = ib.IbPort("mlx5_1", 1, link_layer="Ethernet", counters={"link_downed": 2}, **DOWN)
    samples = ib.port_metrics([port(symbol_error=3), roce])
    first = {name: value for name, labels, value in samples if labels["hca"] == "mlx5_0"}
    assert first == {"gpufleet_ib_port_up": 1.0, "gpufleet_ib_port_state": 4.0, "gpufleet_ib_port_phys_state": 5.0,
                     "gpufleet_ib_port_rate_gbps": 400.0, "gpufleet_ib_port_symbol_error_total": 3.0}
    second = [(name, labels, value) for name, labels, value in samples if labels["hca"] == "mlx5_1"]
    assert second == [(name, {"hca": "mlx5_1", "port": "1", "link_layer": "Ethernet"}, value) for name, value in (
        ("gpufleet_ib_port_up", 0.0), ("gpufleet_ib_port_state", 1.0), ("gpufleet_ib_port_phys_state", 3.0),
        ("gpufleet_ib_port_link_downed_total", 2.0))]


def test_the_judge_on_a_fake_tree(tmp_path: Path) -> None:
    root = str(tmp_path)
    fake_ib.create_tree(root, ["mlx5_0", "mlx5_1"])
    watch = ib.IbWatch()
    assert watch.observe(ib.read_ports(root), 0) == []
    fake_ib.flap(root, "mlx5_0", 1, times=3)
    fake_ib.remove_hca(root, "mlx5_1")
    findings = watch.observe(ib.read_ports(root), 10)
    assert kinds(findings) == [("mlx5_1", 1, "missing"), ("mlx5_0", 1, "flapping")]
    assert ib.ib_verdict(findings)[0] == "fatal"
