"""The audit log as Prometheus metrics: the last line of each remediation counts, once; labels stay names."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.cost_metrics import (
    AuditLogCollector,
    label,
    totals,
)


def line(remediation_id, result, hours, reason="Xid79", plan="RESTART_BM"):
    return {"id": remediation_id, "result": result, "plan": {"name": plan}, "fault": {"reason": reason},
            "cost": {"gpu_hours_lost": hours}}


def test_a_resumed_remediation_counts_once_with_its_last_line():
    lost, ended = totals([line("r-1", "failed", 1.0), line("r-2", "succeeded", 2.5, reason="Xid48", plan="RESET_GPU"),
                          line("r-1", "succeeded", 3.0)])
    assert lost == {("Xid79", "RESTART_BM"): 3.0, ("Xid48", "RESET_GPU"): 2.5}
    assert ended == {("RESTART_BM", "succeeded"): 1, ("RESET_GPU", "succeeded"): 1}


def test_a_record_without_a_cost_counts_as_a_remediation_only():
    lost, ended = totals([{"id": "r-0", "result": "succeeded", "plan": {"name": "HOLD"}, "fault": {}}])
    assert lost == {} and ended == {("HOLD", "succeeded"): 1}


def test_labels_from_conditions_cannot_make_up_series():
    assert [label(value) for value in ("Xid79", "GPU_lost-2", None, "a b", 'x"}', "y" * 65)] == [
        "Xid79", "GPU_lost-2", "none", "other", "other", "other"]


def scrape(collector):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for sample in family.samples}


def test_the_exporter_reads_the_log_again_when_it_changes(tmp_path):
    log = tmp_path / "audit.jsonl"
    collector = AuditLogCollector(str(log))
    assert scrape(collector)[("gpufleet_remediation_audit_lines_skipped", ())] == 0  # no log yet: no series
    log.write_text(json.dumps(line("r-1", "succeeded", 1.25)) + "\n{torn\n")
    seen = scrape(collector)
    assert seen[("gpufleet_incident_gpu_hours_lost_total", (("cause", "Xid79"), ("plan", "RESTART_BM")))] == 1.25
    assert seen[("gpufleet_remediations_total", (("plan", "RESTART_BM"), ("result", "succeeded")))] == 1
    assert seen[("gpufleet_remediation_audit_lines_skipped", ())] == 1
    with log.open("a") as handle:
        handle.write(json.dumps(line("r-2", "stopped", 0.5)) + "\n")
    assert scrape(collector)[("gpufleet_incident_gpu_hours_lost_total", (("cause", "Xid79"),
                                                                         ("plan", "RESTART_BM")))] == 1.75
