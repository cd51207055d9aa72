# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's fake InfiniBand sysfs tree: the kernel's file format, idempotence, link_downed as the
kernel counts it, atomic writes under one lock, and input checks that name the field."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health import infiniband as ib
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_ib


@pytest.fixture
def root(tmp_path: Path) -> str:
    assert fake_ib.create_tree(str(tmp_path), ["mlx5_0", "mlx5_1"]) is True
    return str(tmp_path)


def port_dir(root: str, hca: str = "mlx5_0", port: int = 1) -> Path:
    return Path(root, "class", "infiniband", hca, "ports", str(port))


def text(root: str, name: str, hca: str = "mlx5_0", port: int = 1) -> str:
    return (port_dir(root, hca, port) / name).read_text()


def test_create_tree_writes_the_kernel_format(root: str) -> None:
    assert text(root, "state") == "4: ACTIVE\n"
    assert text(root, "phys_state") == "5: LinkUp\n"
    assert text(root, "rate") == "400 Gb/sec (4X NDR)\n"
    assert text(root, "link_layer") == "InfiniBand\n"
    assert sorted(p.name for p in (port_dir(root) / "counters").iterdir()) == sorted(ib.COUNTERS)
    assert all(text(root, "counters/" + name) == "0\n" for name in ib.COUNTERS)
    assert sorted(p.name for p in Path(root, "class", "infiniband").iterdir()) == [".lock", "mlx5_0", "mlx5_1"]
    assert not list(Path(root).rglob("*.tmp"))


def test_create_tree_is_idempotent_and_keeps_what_a_port_has(root: str) -> None:
    fake_ib.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Polling")
    fake_ib.bump_counter(root, "mlx5_0", 1, "symbol_error", 9)
    assert fake_ib.create_tree(root, ["mlx5_0", "mlx5_1"]) is False
    assert (text(root, "state"), text(root, "counters/symbol_error")) == ("1: DOWN\n", "9\n")
    (port_dir(root) / "counters" / "port_xmit_discards").unlink()
    assert fake_ib.create_tree(root, {"mlx5_0": 2}, rate="100 Gb/sec (2X HDR)", link_layer="Ethernet") is True
    assert text(root, "counters/port_xmit_discards") == "0\n" and text(root, "rate") == "400 Gb/sec (4X NDR)\n"
    assert (text(root, "rate", port=2), text(root, "link_layer", port=2)) == ("100 Gb/sec (2X HDR)\n", "Ethernet\n")


@pytest.mark.parametrize("state, phys_state, written", [
    ("DOWN", "Disabled", ("1: DOWN\n", "3: Disabled\n")),
    (2, 4, ("2: INIT\n", "4: PortConfigurationTraining\n")),
    ("active_defer", "LinkErrorRecovery", ("5: ACTIVE_DEFER\n", "6: LinkErrorRecovery\n")),
    ("armed", "PhyTest", ("3: ARMED\n", "7: Phy Test\n")),
    ("4", "phy test", ("4: ACTIVE\n", "7: Phy Test\n")),
])
def test_set_port_takes_names_or_codes(root: str, state, phys_state, written) -> None:
    assert fake_ib.set_port(root, "mlx5_0", 1, state=state, phys_state=phys_state) is True
    assert (text(root, "state"), text(root, "phys_state")) == written
    assert text(root, "counters/link_downed") == "1\n"  # each of these leaves ACTIVE/LinkUp


def test_link_downed_counts_going_from_up_to_down_only(root: str) -> None:
    fake_ib.set_port(root, "mlx5_0", 1, state="DOWN")
    fake_ib.set_port(root, "mlx5_0", 1, phys_state="Polling")  # down to down: not another one
    assert text(root, "counters/link_downed") == "1\n"
    fake_ib.set_port(root, "mlx5_0", 1, state="ACTIVE", phys_state="LinkUp")
    assert fake_ib.set_port(root, "mlx5_0", 1, state="ACTIVE") is False  # up to up: nothing written
    assert text(root, "counters/link_downed") == "1\n"


def test_set_port_rate(root: str) -> None:
    assert fake_ib.set_port(root, "mlx5_0", 1, rate="200 Gb/sec (4X HDR)") is True
    assert text(root, "rate") == "200 Gb/sec (4X HDR)\n"
    fake_ib.set_port(root, "mlx5_0", 1, rate=25)
    assert ib.read_ports(root)[0].rate_gbps == 25.0
    assert text(root, "counters/link_downed") == "0\n"


def test_bump_and_reset_counters(root: str) -> None:
    assert fake_ib.bump_counter(root, "mlx5_1", 1, "port_rcv_errors") == 1
    assert fake_ib.bump_counter(root, "mlx5_1", 1, "port_rcv_errors", by=41) == 42
    assert fake_ib.reset_counters(root, "mlx5_1", 1) is True
    assert ib.read_ports(root)[1].counters == dict.fromkeys(ib.COUNTERS, 0)


def test_flap_ends_up_with_one_link_downed_per_flap(root: str) -> None:
    assert fake_ib.flap(root, "mlx5_0", 1, times=3) == 3
    assert (text(root, "state"), text(root, "phys_state")) == ("4: ACTIVE\n", "5: LinkUp\n")
    fake_ib.set_port(root, "mlx5_0", 1, state="DOWN", phys_state="Disabled")  # 4
    assert fake_ib.flap(root, "mlx5_0", 1) == 5  # a port found down comes up first, then flaps once
    assert ib.read_ports(root)[0].up


def test_remove_hca_and_back(root: str) -> None:
    fake_ib.bump_counter(root, "mlx5_1", 1, "symbol_error", 5)
    assert fake_ib.remove_hca(root, "mlx5_1") is True
    assert fake_ib.remove_hca(root, "mlx5_1") is False
    assert [p.name for p in ib.read_ports(root)] == ["mlx5_0/1"]
    assert fake_ib.create_tree(root, ["mlx5_1"]) is True
    assert ib.read_ports(root)[1].counters["symbol_error"] == 0  # a new device: counters from 0
    assert [p.name for p in Path(root, "class", "infiniband").iterdir() if p.name.startswith(".")] == [".lock"]


def test_writers_in_parallel_lose_no_increment(root: str) -> None:
    def bump() -> None:
        for _bump in range(50):
            fake_ib.bump_counter(root, "mlx5_0", 1, "symbol_error")

    threads = [threading.Thread(target=bump) for _thread in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert text(root, "counters/symbol_error") == "200\n"


@pytest.mark.parametrize("call, field", [
    (lambda r: fake_ib.set_port(r, "mlx5_0", 1, state="UPPISH"), "state"),
    (lambda r: fake_ib.set_port(r, "mlx5_0", 1, state=9), "state"),
    (lambda r: fake_ib.set_port(r, "mlx5_0", 1, state=True), "state"),
    (lambda r: fake_ib.set_port(r, "mlx5_0", 1, phys_state="Asleep"), "phys_state"),
    (lambda r: fake_ib.set_port(r, "mlx5_0", 1, rate="fast"), "rate"),
    (lambda r: fake_ib.set_port(r, "mlx5-0", 1, state="DOWN"), "hca"),
    (lambda r: fake_ib.set_port(r, "mlx5_0", 2, state="DOWN"), "port"),
    (lambda r: fake_ib.set_port(r, "mlx5_9", 1, state="DOWN"), "port"),
    (lambda r: fake_ib.bump_counter(r, "mlx5_0", 1, "crc_errors"), "counter"),
    (lambda r: fake_ib.bump_counter(r, "mlx5_0", 1, "symbol_error", by=-1), "by"),
    (lambda r: fake_ib.flap(r, "mlx5_0", 1, times=0), "times"),
    (lambda r: fake_ib.remove_hca(r, "../etc"), "hca"),
    (lambda r: fake_ib.create_tree(r, ["mlx5_0", "mlx5 1"]), "hcas[1]"),
    (lambda r: fake_ib.create_tree(r, {"mlx5_0": 0}), "hcas.mlx5_0"),
    (lambda r: fake_ib.create_tree(r, "mlx5_0"), "hcas"),
    (lambda r: fake_ib.create_tree(r, ["mlx5_0"], ports_per_hca=0), "ports_per_hca"),
    (lambda r: fake_ib.create_tree(r, ["mlx5_0"], link_layer="Ethernet2"), "link_layer"),
    (lambda r: fake_ib.bump_counter(r + "/elsewhere", "mlx5_0", 1, "symbol_error"), "root"),
])
def test_bad_input_names_the_field(root: str, call, field) -> None:
    before = sorted(str(p) for p in Path(root).rglob("*"))
    with pytest.raises(FieldError) as raised:
        call(root)
    assert raised.value.field == field
    assert sorted(str(p) for p in Path(root).rglob("*")) == before
