# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The evidence bundle: parts collected or named as missing, caps, retention, and a rerun that
collects nothing again. Real files in a temporary directory; the sources are plain callables."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import read_tail
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import evidence
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.evidence_sources import sources

LIMITS = evidence.Limits(part_bytes=1000, bundle_bytes=1500, keep=3)


def failing(why):
    def source():
        raise FileNotFoundError(why)
    return source


def test_each_part_is_written_with_its_digest_and_a_missing_one_says_why(tmp_path):
    parts = {"slurm.json": lambda: b'{"node": "gpu-a-003"}\n', "kernel.log": failing("no kernel log here")}
    done = evidence.collect(str(tmp_path), "r-1", "gpu-a-003", parts, LIMITS, clock=lambda: 100.0)
    bundle = tmp_path / "r-1"
    assert done["changed"] and done["path"] == str(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["parts"] == [{"name": "slurm.json", "bytes": 22, "cut": False,
                                  "sha256": hashlib.sha256(b'{"node": "gpu-a-003"}\n').hexdigest()}]
    assert manifest["missing"] == [{"part": "kernel.log", "why": "no kernel log here"}]
    assert (bundle / "slurm.json").read_bytes() == b'{"node": "gpu-a-003"}\n'
    assert not (bundle / "kernel.log").exists() and not (tmp_path / "r-1.partial").exists()


def test_a_rerun_after_the_bundle_is_finished_collects_nothing(tmp_path):
    calls = []
    parts = {"a.txt": lambda: calls.append(1) or b"a"}
    evidence.collect(str(tmp_path), "r-1", "n1", parts, LIMITS)
    again = evidence.collect(str(tmp_path), "r-1", "n1", parts, LIMITS)
    assert not again["changed"] and calls == [1]
    # Check mode writes nothing and says what it would collect.
    planned = evidence.collect(str(tmp_path), "r-2", "n1", parts, LIMITS, check_mode=True)
    assert planned["manifest"]["would_collect"] == ["a.txt"] and not (tmp_path / "r-2").exists()


def test_parts_keep_their_end_and_the_bundle_stops_at_its_cap(tmp_path):
    parts = {"one.log": lambda: b"x" * 900 + b"END1", "two.log": lambda: b"y" * 2000 + b"END2",
             "three.log": lambda: b"z"}
    manifest = evidence.collect(str(tmp_path), "r-1", "n1", parts, LIMITS)["manifest"]
    sizes = {part["name"]: (part["bytes"], part["cut"]) for part in manifest["parts"]}
    assert sizes == {"one.log": (904, False), "two.log": (596, True)}, "the bundle's 1500 bytes are spent"
    assert (tmp_path / "r-1" / "two.log").read_bytes().endswith(b"END2"), "the end of a file is kept"
    assert manifest["missing"] == [{"part": "three.log", "why": "the bundle's cap of 1500 bytes was reached"}]


def test_the_oldest_bundles_beyond_keep_go(tmp_path):
    for number in range(5):
        evidence.collect(str(tmp_path), "r-%d" % number, "n1", {"a": lambda: b"a"}, LIMITS,
                         clock=lambda number=number: 100.0 + number)
    assert sorted(os.listdir(tmp_path)) == ["r-2", "r-3", "r-4"]


def test_a_tail_starts_at_a_line(tmp_path):
    log = tmp_path / "kmsg.log"
    log.write_bytes(b"first line\nsecond line\nNVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n")
    assert read_tail(str(log), 70) == b"NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"


@pytest.mark.parametrize("bad", ["", "..", "a/b", "../r-1", "r 1", "x\n"])
def test_a_remediation_id_that_is_not_a_file_name_is_refused(tmp_path, bad):
    with pytest.raises(FieldError) as refused:
        evidence.collect(str(tmp_path), bad, "n1", {}, LIMITS)
    assert refused.value.field == "remediation_id"
    assert os.listdir(tmp_path) == []


def test_the_agents_files_are_found_through_its_configuration(tmp_path):
    journal, kmsg = tmp_path / "events.jsonl", tmp_path / "kmsg.log"
    journal.write_text('{"event": "xid", "xid": 79}\n')
    kmsg.write_text("NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n")
    config = tmp_path / "agent.yml"
    config.write_text("node: gpu-a-003\njournal: %s\nkernel_log: {source: file, path: %s}\nmetrics: {}\n"
                      % (journal, kmsg))
    found = sources("gpu-a-003", lambda: None, lambda: None, str(config), False, str(tmp_path))
    assert list(found) == ["slurm.json", "kubernetes.json", "agent-metrics.txt", "agent-journal.jsonl", "kernel.log",
                           "nvidia-bug-report.log.gz"]
    assert found["agent-journal.jsonl"]() == journal.read_bytes()
    assert found["kernel.log"]() == kmsg.read_bytes()
    with pytest.raises(ValueError, match="no metrics port"):
        found["agent-metrics.txt"]()
    with pytest.raises(RuntimeError, match="bug_report is false"):
        found["nvidia-bug-report.log.gz"]()
    none = sources("gpu-a-003", lambda: None, lambda: None, None, True, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no agent_config given"):
        none["kernel.log"]()
