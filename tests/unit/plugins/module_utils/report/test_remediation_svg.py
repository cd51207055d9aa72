"""A remediation drawn from its audit record, built with the remediation's own progress rules."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import plans
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation import progress as progress_rules
from ansible_collections.gpufleet.resilience.plugins.module_utils.remediation.record import audit_record
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import remediation_svg

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1764472502.0
FAULT = {"verdict": "fatal", "action": "RESTART_BM", "reason": "Xid79", "xids": [79], "gpu_index": 2}
JOB = {"job_id": "41", "signalled": True, "fate": "requeued", "state": "PENDING"}


def record(plan_name="RESTART_BM", steps=(), result="succeeded", stop=None):
    progress = progress_rules.new_progress("r-1", "gpu-a-003", plans.plan_for(plan_name), FAULT,
                                           {"source": "alertmanager", "alert": "GpuNodeFatal"}, T0, {"pid": 1})
    for phase, at, outcome in steps:
        progress = progress_rules.mark_phase(progress, phase, outcome, T0 + at,
                                             stop=stop if phase == "opt_out" else None)
    progress = progress_rules.finish(progress, result, T0 + (steps[-1][1] if steps else 1))
    return audit_record(progress)


REPLACED = record(steps=[("fence", 0.2, {}), ("quarantine", 0.3, {}), ("notify", 0.5, {}),
                         ("jobs", 3.0, {"jobs": [JOB]}), ("down", 3.2, {}), ("opt_out", 3.4, {}),
                         ("drain", 5.0, {}), ("evidence", 5.4, {"path": "/var/lib/gpufleet/evidence/r-1"}),
                         ("replace", 14.0, {"spare": "gpu-a-005"}), ("admit", 14.8, {"passed": True}),
                         ("record", 14.9, {})])


def groups(root, cls):
    return [g for g in root.iter(SVG + "g") if cls in (g.get("class") or "").split()]


def texts(element):
    return [t.text for t in element.iter(SVG + "text")]


def test_a_replacement_shows_every_phase_the_states_and_the_job():
    svg = remediation_svg.render(REPLACED)
    root = ET.fromstring(svg)  # well-formed, self-contained
    assert "Remediation r-1 of gpu-a-003: plan RESTART_BM, succeeded in 14.9 s" in texts(root)
    phases = groups(root, "phase")
    assert [g.get("class").split()[1] for g in phases] == ["phase-%s" % p for p in plans.plan_for("RESTART_BM").phases]
    assert all("outcome-done" in g.get("class") for g in phases)
    # The Slurm lane: in service, DRAIN after the fence, DOWN after down, retired at the replacement.
    slurm = groups(root, "lane-slurm")[0]
    states = [r.find(SVG + "title").text for r in slurm.iter(SVG + "rect")]
    assert states == ["Slurm: in service from +0.0 s", "Slurm: DRAIN from +0.2 s", "Slurm: DOWN from +3.2 s",
                      "Slurm: retired, spare in from +14.0 s"]
    kube = [r.find(SVG + "title").text for r in groups(root, "lane-kubernetes")[0].iter(SVG + "rect")]
    assert kube == ["Kubernetes: in service from +0.0 s", "Kubernetes: cordoned, tainted from +0.3 s",
                    "Kubernetes: drained from +5.0 s", "Kubernetes: replaced from +14.0 s"]
    assert "job 41: signalled, requeued (PENDING)" in texts(root)


def test_bars_sit_where_their_phases_ran():
    root = ET.fromstring(remediation_svg.render(REPLACED))
    bars = {g.get("class").split()[1]: g.find(SVG + "rect") for g in groups(root, "phase")}
    replace, fence = bars["phase-replace"], bars["phase-fence"]
    # The replacement (5 s to 14 s) is the widest bar and starts right of the fence (0 to 0.2 s).
    assert float(replace.get("x")) > float(fence.get("x"))
    assert float(replace.get("width")) == max(float(rect.get("width")) for rect in bars.values())


def test_an_opt_out_skips_the_rest_and_says_why():
    stopped = record(steps=[("fence", 0.2, {}), ("quarantine", 0.3, {}), ("notify", 0.5, {}),
                            ("jobs", 1.0, {"jobs": []}), ("down", 1.1, {}), ("opt_out", 1.2, {}), ("record", 1.3, {})],
                     stop="node labelled gpufleet.io/remediation=disabled")
    root = ET.fromstring(remediation_svg.render(stopped))
    skipped = [g for g in groups(root, "phase") if "outcome-skipped" in g.get("class")]
    assert [g.get("class").split()[1] for g in skipped] == ["phase-drain", "phase-evidence", "phase-replace",
                                                            "phase-admit"]
    assert any("skipped: node labelled" in t for g in skipped for t in texts(g))
    assert any("stopped at opt_out" in t for t in texts(root))
    assert "Jobs: none on the node" in texts(root)


def test_a_failed_run_marks_its_last_phase_red_and_text_is_escaped():
    failed = record(plan_name="RESET_GPU", steps=[("fence", 0.2, {}), ("quarantine", 0.3, {})], result="failed")
    failed["node"] = "gpu-<a>&b"
    svg = remediation_svg.render(failed)
    root = ET.fromstring(svg)
    last = groups(root, "phase")[-1]
    assert "outcome-failed" in last.get("class")
    assert last.find(SVG + "rect").get("fill") == remediation_svg.OUTCOME_COLOURS["failed"][0]
    assert "gpu-<a>&b" in " ".join(texts(root)) and "<a>" not in svg.replace("&lt;a&gt;", "")
