# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The NVML reader's light snapshots, on the fake libnvidia-ml.so.1 through unmodified pynvml.

A light snapshot (``full=False``) reads what the verdict needs every second and carries the slow
fields (NVLinks, aggregate ECC) from that GPU's last full read; identity is read once.
"""

from __future__ import annotations

import ctypes
from typing import Iterator

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.nvml import NvmlReader
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state as fgs


@pytest.fixture
def reader(preloaded: ctypes.CDLL, node_dir: str) -> Iterator[NvmlReader]:
    with NvmlReader() as opened:
        yield opened


def test_a_light_snapshot_reads_the_fast_fields_and_carries_the_slow_ones(reader: NvmlReader, node_dir: str) -> None:
    first = reader.snapshot(full=False)  # no full read yet: every GPU is read in full
    assert len(first[0].nvlinks) == 18 and all(link.active for link in first[0].nvlinks)
    assert first[0].ecc_dbe_aggregate == 0

    fgs.set_fields(node_dir, 0, nvlink_down=0b100, nvlink_crc_flit_errors=7, ecc_dbe_aggregate=3,
                   ecc_dbe_volatile=2, temperature=91)
    light = reader.snapshot(full=False)[0]
    # Fast: the verdict's fields are read every time.
    assert light.ecc_dbe_volatile == 2 and light.temperature_c == 91
    # Slow: carried from the last full read.
    assert light.nvlinks == first[0].nvlinks and light.ecc_dbe_aggregate == 0

    full = reader.snapshot(full=True)[0]
    assert full.nvlinks[2].active is False and full.nvlinks[0].crc_flit_errors == 7
    assert full.ecc_dbe_aggregate == 3
    assert reader.snapshot(full=False)[0].nvlinks == full.nvlinks


def test_a_lost_gpu_keeps_its_identity_and_is_read_in_full_when_back(reader: NvmlReader, node_dir: str) -> None:
    gpus = fgs.read(node_dir)["gpus"]
    before = reader.snapshot(full=True)[3]
    assert before.uuid == gpus[3]["uuid"] and before.pci_bus_id

    fgs.set_lost(node_dir, 3)
    lost = reader.snapshot(full=False)[3]
    assert lost.lost and lost.uuid == before.uuid and lost.pci_bus_id == before.pci_bus_id
    assert lost.nvlinks == ()

    # Back, with a link down meanwhile: its first snapshot is a full read, light or not.
    fgs.set_fields(node_dir, 3, lost=False, nvlink_down=1)
    back = reader.snapshot(full=False)[3]
    assert not back.lost and back.nvlinks[0].active is False and back.uuid == before.uuid
