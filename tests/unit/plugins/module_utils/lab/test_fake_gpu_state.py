# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The state files that the fake libnvidia-ml.so.1 reads, written through fake_gpu_state and fakegpu."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state as fgs

REPO = Path(__file__).resolve().parents[5]
FAKEGPU = REPO / "tools" / "fake-nvml" / "fakegpu"
PRODUCT = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def node_dir(tmp_path: Path) -> str:
    state_dir = str(tmp_path / "gpu-a-001")
    assert fgs.init(state_dir, 8, "gpu-a-001", PRODUCT) is True
    return state_dir


def state_lines(state_dir: str, gpu: int) -> dict[str, str]:
    text = Path(state_dir, f"gpu{gpu}.state").read_text()
    return dict(line.split("=", 1) for line in text.splitlines())


# ---------------------------------------------------------------- init


def test_init_writes_the_files_the_c_library_reads(node_dir: str) -> None:
    node = dict(line.split("=", 1) for line in Path(node_dir, "node.state").read_text().splitlines())
    assert node["count"] == "8"
    assert node["node"] == "gpu-a-001"
    gpu0 = state_lines(node_dir, 0)
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", gpu0["uuid"])
    assert gpu0["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu0["pci_bus_id"] == "00000000:18:00.0"
    assert int(gpu0["pci_device_id"]) == 0x233010DE
    assert int(gpu0["memory_total"]) == 80 * 1024**3
    assert gpu0["lost"] == "0"
    assert Path(node_dir, "events").is_dir()
    assert not list(Path(node_dir).glob(".*.tmp")), "temporary files must be renamed into place"


def test_init_gives_each_gpu_its_own_identity(node_dir: str) -> None:
    gpus = fgs.read(node_dir)["gpus"]
    for key in ("uuid", "serial", "pci_bus_id"):
        assert len({gpu[key] for gpu in gpus}) == 8, key
    assert [gpu["index"] for gpu in gpus] == list(range(8))


def test_init_is_idempotent_and_keeps_identity_and_faults(node_dir: str) -> None:
    before = fgs.read(node_dir)
    fgs.set_fields(node_dir, 3, temperature=90)
    after_fault = fgs.read(node_dir)
    assert fgs.init(node_dir, 8, "gpu-a-001", PRODUCT) is False
    assert fgs.read(node_dir) == after_fault
    assert [g["uuid"] for g in after_fault["gpus"]] == [g["uuid"] for g in before["gpus"]]


def test_init_resizes_keeping_the_remaining_uuids(node_dir: str) -> None:
    uuids = [g["uuid"] for g in fgs.read(node_dir)["gpus"]]
    assert fgs.init(node_dir, 4, "gpu-a-001", PRODUCT) is True
    assert not Path(node_dir, "gpu4.state").exists()
    assert [g["uuid"] for g in fgs.read(node_dir)["gpus"]] == uuids[:4]
    fgs.init(node_dir, 6, "gpu-a-001", PRODUCT)
    grown = [g["uuid"] for g in fgs.read(node_dir)["gpus"]]
    assert grown[:4] == uuids[:4] and len(set(grown)) == 6


def test_init_with_another_product_renames_but_keeps_uuid(node_dir: str) -> None:
    uuid0 = fgs.read(node_dir)["gpus"][0]["uuid"]
    assert fgs.init(node_dir, 8, "gpu-a-001", "NVIDIA-H200-141GB-HBM3e") is True
    gpu0 = fgs.read(node_dir)["gpus"][0]
    assert (gpu0["uuid"], gpu0["name"], gpu0["memory_total"]) == (uuid0, "NVIDIA H200 141GB HBM3e", 141 * 1024**3)
    assert gpu0["pci_device_id"] == 0x233510DE


@pytest.mark.parametrize(
    ("count", "node", "product", "message"),
    [
        (0, "n", PRODUCT, "count must be"),
        (33, "n", PRODUCT, "count must be"),
        (True, "n", PRODUCT, "count must be"),
        (2, "bad node", PRODUCT, "field 'node'"),
        (2, "n", "a=b", "field 'product'"),
    ],
)
def test_init_rejects_bad_input(tmp_path: Path, count: object, node: str, product: str, message: str) -> None:
    with pytest.raises(fgs.FakeGpuStateError, match=message):
        fgs.init(str(tmp_path / "x"), count, node, product)  # type: ignore[arg-type]


# ---------------------------------------------------------------- set_fields


def test_set_fields_converts_and_reports_change(node_dir: str) -> None:
    changed = fgs.set_fields(
        node_dir, 2, temperature="95", ecc_dbe_volatile=2, throttle_reasons="0x40", nvlink_supported="false"
    )
    assert changed is True
    gpu2 = fgs.read(node_dir)["gpus"][2]
    assert (gpu2["temperature"], gpu2["ecc_dbe_volatile"], gpu2["throttle_reasons"]) == (95, 2, 0x40)
    assert gpu2["nvlink_supported"] is False
    assert state_lines(node_dir, 2)["throttle_reasons"] == "64"  # the C side never parses user strings
    assert fgs.set_fields(node_dir, 2, temperature=95) is False
    assert fgs.read(node_dir)["gpus"][1]["temperature"] == 35, "other GPUs are untouched"


@pytest.mark.parametrize(
    ("fields", "bad_field"),
    [
        ({"temprature": 95}, "temprature"),
        ({"uuid": "GPU-x"}, "uuid"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": -1}, "temperature"),
        ({"utilization_gpu": 101}, "utilization_gpu"),
        ({"nvlink_links": 37}, "nvlink_links"),
        ({"ecc_sbe_volatile": 2**64}, "ecc_sbe_volatile"),
        ({"lost": "maybe"}, "lost"),
        ({"temperature": True}, "temperature"),
    ],
)
def test_set_fields_names_the_bad_field(node_dir: str, fields: dict[str, object], bad_field: str) -> None:
    before = fgs.read(node_dir)
    with pytest.raises(fgs.FieldError) as excinfo:
        fgs.set_fields(node_dir, 0, **fields)
    assert excinfo.value.field == bad_field
    assert bad_field in str(excinfo.value)
    assert fgs.read(node_dir) == before


@pytest.mark.parametrize("gpu", [-1, 8, "0"])
def test_set_fields_rejects_a_gpu_that_does_not_exist(node_dir: str, gpu: object) -> None:
    with pytest.raises(fgs.FakeGpuStateError, match="does not exist"):
        fgs.set_fields(node_dir, gpu, temperature=1)  # type: ignore[arg-type]


def test_concurrent_writers_do_not_lose_updates(node_dir: str) -> None:
    fields = ["ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate", "power_mw"]

    def bump(name: str) -> None:
        for value in range(1, 21):
            fgs.set_fields(node_dir, 0, **{name: value})

    threads = [threading.Thread(target=bump, args=(name,)) for name in fields]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    gpu0 = fgs.read(node_dir)["gpus"][0]
    assert {name: gpu0[name] for name in fields} == dict.fromkeys(fields, 20)


def test_set_lost_and_back(node_dir: str) -> None:
    assert fgs.set_lost(node_dir, 5) is True
    assert state_lines(node_dir, 5)["lost"] == "1"
    assert fgs.set_lost(node_dir, 5, lost=False) is True
    assert fgs.read(node_dir)["gpus"][5]["lost"] is False


# ---------------------------------------------------------------- events, clear, read


def test_inject_xid_queues_events_in_order(node_dir: str) -> None:
    first = fgs.inject_xid(node_dir, 1, 79)
    second = fgs.inject_xid(node_dir, 6, 48)
    assert re.fullmatch(r"\d{20}-[0-9a-f]{8}-gpu1-xid79\.event", first)
    assert Path(node_dir, "events", first).stat().st_size == 0
    pending = fgs.read(node_dir)["pending_events"]
    assert pending == [{"gpu": 1, "xid": 79, "file": first}, {"gpu": 6, "xid": 48, "file": second}]


@pytest.mark.parametrize(("gpu", "xid", "message"), [(8, 79, "does not exist"), (0, 0, "xid must"), (0, "79", "xid")])
def test_inject_xid_rejects_bad_input(node_dir: str, gpu: int, xid: object, message: str) -> None:
    with pytest.raises(fgs.FakeGpuStateError, match=message):
        fgs.inject_xid(node_dir, gpu, xid)  # type: ignore[arg-type]
    assert fgs.read(node_dir)["pending_events"] == []


def test_clear_restores_health_and_keeps_identity_and_capabilities(node_dir: str) -> None:
    healthy = fgs.read(node_dir)
    fgs.set_fields(node_dir, 0, nvlink_links=12, memory_total=1024)  # capabilities
    fgs.set_fields(node_dir, 0, temperature=99, ecc_dbe_aggregate=3, remapped_rows_failure=1, nvlink_down=3)
    fgs.set_lost(node_dir, 7)
    fgs.inject_xid(node_dir, 7, 79)
    Path(node_dir, "events", ".claimed-1-1-leftover").touch()  # a waiter that died mid-claim
    assert fgs.clear(node_dir) is True
    state = fgs.read(node_dir)
    assert state["pending_events"] == []
    assert os.listdir(Path(node_dir, "events")) == []
    expected = dict(healthy["gpus"][0], nvlink_links=12, memory_total=1024)
    assert state["gpus"][0] == expected
    assert state["gpus"][1:] == healthy["gpus"][1:]
    assert fgs.clear(node_dir) is False


def test_field_groups_cover_every_field_once() -> None:
    groups = fgs.IDENTITY_FIELDS + fgs.CAPABILITY_FIELDS + fgs.HEALTH_FIELDS
    assert sorted(groups) == sorted(f for f in fgs.GpuState.__dataclass_fields__)
    assert "lost" in fgs.HEALTH_FIELDS


def test_read_of_a_missing_directory_says_run_init(tmp_path: Path) -> None:
    with pytest.raises(fgs.FakeGpuStateError, match="run init"):
        fgs.read(str(tmp_path / "nothing"))


def test_a_corrupt_state_file_is_reported_with_its_path(node_dir: str) -> None:
    Path(node_dir, "gpu3.state").write_text("uuid=GPU-x\n")
    with pytest.raises(fgs.FakeGpuStateError, match=r"gpu3\.state: missing key 'serial'"):
        fgs.read(node_dir)


# ---------------------------------------------------------------- CLI


def fakegpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FAKEGPU), *args], capture_output=True, text=True, check=False)


def test_cli_round_trip(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "n")
    init = fakegpu("--dir", state_dir, "init", "--count", "2", "--node", "gpu-a-002", "--product", PRODUCT)
    assert (init.returncode, json.loads(init.stdout)) == (0, {"changed": True})
    set_ = fakegpu("--dir", state_dir, "set", "--gpu", "1", "temperature=95", "throttle_reasons=0x40")
    assert (set_.returncode, json.loads(set_.stdout)) == (0, {"changed": True})
    xid = fakegpu("--dir", state_dir, "xid", "--gpu", "1", "--xid", "79")
    assert json.loads(xid.stdout)["event"].endswith("-gpu1-xid79.event")
    assert fakegpu("--dir", state_dir, "lost", "--gpu", "1").returncode == 0
    shown = json.loads(fakegpu("--dir", state_dir, "show").stdout)
    assert (shown["gpus"][1]["temperature"], shown["gpus"][1]["throttle_reasons"], shown["gpus"][1]["lost"]) == (
        95,
        0x40,
        True,
    )
    assert [e["xid"] for e in shown["pending_events"]] == [79]
    assert json.loads(fakegpu("--dir", state_dir, "clear").stdout) == {"changed": True}
    assert json.loads(fakegpu("--dir", state_dir, "show").stdout)["gpus"][1]["lost"] is False


@pytest.mark.parametrize(
    ("args", "code", "stderr"),
    [
        (["set", "--gpu", "0", "temprature=95"], 1, "field 'temprature'"),
        (["set", "--gpu", "0", "temperature"], 1, "expected FIELD=VALUE"),
        (["set", "--gpu", "9", "temperature=1"], 1, "gpu 9 does not exist"),
        (["xid", "--gpu", "0"], 2, "--xid"),
        (["explode"], 2, "invalid choice"),
    ],
)
def test_cli_errors(tmp_path: Path, args: list[str], code: int, stderr: str) -> None:
    state_dir = str(tmp_path / "n")
    fgs.init(state_dir, 1, "gpu-a-003", PRODUCT)
    result = fakegpu("--dir", state_dir, *args)
    assert result.returncode == code
    assert stderr in result.stderr
    assert result.stdout == ""
