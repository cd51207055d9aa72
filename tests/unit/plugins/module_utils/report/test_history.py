# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""drill_history's comparison: did the newest time to recover regress against the median of the ones before?"""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils import report
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import history


def drill(number, recover, experiment="gpu_xid", result="passed", lost=0):
    return {
        "schema": "gpufleet.drill/v1", "id": "d-%02d" % number, "experiment": experiment, "result": result,
        "started_at": 1796068200.0 + number * 3600, "steps": [],
        "metrics": {"time_to_recover_s": recover, "steps_lost": lost},
    }


def test_a_slower_newest_drill_regressed():
    docs = [drill(1, 40.0), drill(2, 44.0), drill(3, 50.0), drill(4, 61.0)]
    result = history.compare(docs, "gpu_xid")
    # median(40, 44, 50) = 44; limit 44 * 1.2 = 52.8; 61 > 52.8
    assert result["regressed"] is True
    assert result["figures"] == {"newest": "d-04", "newest_s": 61.0, "median_s": 44.0, "limit_s": pytest.approx(52.8),
                                 "tolerance": 0.2, "compared": ["d-01", "d-02", "d-03"]}
    assert result["why"].startswith("d-04 recovered in 61.0 s; the median of 3 drills before it is 44.0 s")
    assert result["why"].endswith("limit with 20 % tolerance is 52.8 s: regressed")
    assert [row["id"] for row in result["drills"]] == ["d-01", "d-02", "d-03", "d-04"]
    assert result["drills"][0] == {"id": "d-01", "started_at": 1796071800.0, "result": "passed",
                                   "time_to_recover_s": 40.0, "steps_lost": 0, "score": None}


def test_within_tolerance_is_no_regression_and_the_limit_is_exclusive():
    docs = [drill(1, 40.0), drill(2, 50.0), drill(3, 53.0)]  # median 45, limit 54
    assert history.compare(docs, "gpu_xid")["regressed"] is False
    assert "no regression" in history.compare(docs, "gpu_xid")["why"]
    exact = [drill(1, 45.0), drill(2, 55.0), drill(3, 60.0)]  # median 50, limit 60: not worse by MORE than 20 %
    assert history.compare(exact, "gpu_xid")["regressed"] is False
    assert history.compare(exact, "gpu_xid", tolerance=0.1)["regressed"] is True
    assert history.compare(exact, "gpu_xid", tolerance=0)["regressed"] is True


def test_faster_is_never_a_regression():
    docs = [drill(1, 90.0), drill(2, 80.0), drill(3, 10.0)]
    assert history.compare(docs, "gpu_xid")["regressed"] is False


def test_the_median_ignores_one_outlier():
    docs = [drill(1, 40.0), drill(2, 400.0), drill(3, 42.0), drill(4, 44.0), drill(5, 55.0)]
    result = history.compare(docs, "gpu_xid")
    assert result["figures"]["median_s"] == 43.0  # median(40, 400, 42, 44); a mean would be 131.5
    assert result["regressed"] is True


def test_only_the_last_n_of_the_experiment_count_in_start_order():
    docs = [drill(n, 100.0 if n < 4 else 40.0 + n) for n in range(1, 9)]
    docs += [drill(20, 500.0, experiment="gpu_burn")]
    docs.reverse()  # the order of the files does not matter, started_at does
    result = history.compare(docs, "gpu_xid", last=3)
    assert [row["id"] for row in result["drills"]] == ["d-06", "d-07", "d-08"]
    assert result["figures"]["compared"] == ["d-06", "d-07"] and result["figures"]["median_s"] == 46.5
    assert result["regressed"] is False  # 48 <= 46.5 * 1.2


@pytest.mark.parametrize(
    "docs, count",
    [
        ([], 0),
        ([drill(1, 40.0)], 1),
        ([drill(1, None, result="aborted"), drill(2, 40.0), drill(3, None, result="dry_run")], 1),
        ([drill(1, 40.0, experiment="gpu_burn"), drill(2, 41.0, experiment="gpu_burn"), drill(3, 40.0)], 1),
    ],
)
def test_fewer_than_two_comparable_drills_give_no_verdict(docs, count):
    result = history.compare(docs, "gpu_xid")
    assert result["regressed"] is False and result["figures"] is None
    assert result["why"].startswith("not enough drills: %d of the last" % count)


def test_a_newest_drill_without_a_figure_is_named_in_the_verdict():
    docs = [drill(1, 40.0), drill(2, 42.0), drill(3, None, result="failed", lost=None)]
    result = history.compare(docs, "gpu_xid")
    assert result["figures"]["newest"] == "d-02"
    assert result["why"].endswith("(newer drills without a time to recover: d-03 failed)")
    assert result["drills"][-1]["time_to_recover_s"] is None


def test_non_numeric_figures_are_not_compared():
    docs = [drill(1, 40.0), drill(2, "fast"), drill(3, True), drill(4, 60.0)]
    result = history.compare(docs, "gpu_xid")
    assert result["figures"]["compared"] == ["d-01"]


@pytest.mark.parametrize("last, tolerance, field", [(1, 0.2, "last"), (0, 0.2, "last"), (True, 0.2, "last"),
                                                    (5, -0.1, "tolerance"), (5, "x", "tolerance")])
def test_bad_settings_name_their_field(last, tolerance, field):
    with pytest.raises(FieldError) as error:
        history.compare([], "gpu_xid", last=last, tolerance=tolerance)
    assert error.value.field == field


# -- reading the reports directory -----------------------------------------------------------------
def test_drill_history_reads_what_drill_report_wrote(tmp_path, passed, failed):
    slower = copy.deepcopy(passed)
    slower.update(id="d-20261202-101500-ef56", started_at=passed["started_at"] + 2 * 86400)
    slower["metrics"]["time_to_recover_s"] = 71.0
    for doc in (passed, failed, slower):
        report.write_reports(doc, str(tmp_path), ["json", "junit"], check_mode=False)
    (tmp_path / "drill-broken.json").write_text("{not json")
    (tmp_path / "drill-other.json").write_text(json.dumps({"id": "x", "experiment": "e"}))
    result = report.drill_history(str(tmp_path), "gpu_xid", 5, 0.2)
    assert [row["id"] for row in result["drills"]] == [passed["id"], failed["id"], slower["id"]]
    assert result["regressed"] is True and result["figures"]["median_s"] == 45.2
    assert sorted(item["file"].rsplit("/", 1)[1] for item in result["unreadable"]) == [
        "drill-broken.json", "drill-other.json"]
    assert "steps" in next(item["why"] for item in result["unreadable"] if "other" in item["file"])


def test_drill_history_needs_a_directory(tmp_path):
    with pytest.raises(FieldError) as error:
        report.drill_history(str(tmp_path / "missing"), "gpu_xid", 5, 0.2)
    assert error.value.field == "dest"


def steps(detected, alerted, scheduler, recovered):
    """Loop steps: each (verdict, seconds) against a 100 s deadline."""
    return [{"step": name, "verdict": verdict, "elapsed_s": elapsed, "deadline_s": 100.0}
            for name, (verdict, elapsed) in zip(("detected", "alerted", "scheduler", "recovered"),
                                                (detected, alerted, scheduler, recovered), strict=True)]


def test_the_resiliency_score_weights_each_step_and_its_time():
    from ansible_collections.gpufleet.resilience.plugins.module_utils.report.document import resiliency_score

    instant = {"steps": steps(("pass", 0.0), ("pass", 0.0), ("pass", 0.0), ("pass", 0.0))}
    assert resiliency_score(instant) == 100.0
    # Each step at its deadline earns half its weight; a missed step nothing.
    assert resiliency_score({"steps": steps(("pass", 100.0), ("pass", 100.0), ("pass", 100.0),
                                            ("pass", 100.0))}) == 50.0
    missed_recovery = {"steps": steps(("pass", 0.0), ("pass", 0.0), ("pass", 0.0), ("fail", None))}
    assert resiliency_score(missed_recovery) == 70.0  # recovery is 30 of the 100
    # Not expected, not observable: out of the count either way (a non-fatal fault has no fence).
    no_fence = {"steps": steps(("pass", 10.0), ("fail", None), ("skipped", None), ("not_observable", None))}
    assert resiliency_score(no_fence) == pytest.approx(round(100 * 25 * 0.95 / 45, 1))
    assert resiliency_score(dict(instant, dry_run=True)) is None
    assert resiliency_score({"steps": []}) is None


def test_the_score_trend_is_the_newest_against_the_median_before():
    docs = [dict(drill(n, 40.0), steps=steps(("pass", 10.0 * n), ("pass", 0.0), ("pass", 0.0), ("pass", 0.0)))
            for n in (1, 2, 3)]
    trend = history.compare(docs, "gpu_xid")["score_trend"]
    # detected at 10, 20, 30 s of 100: 25 * (1 - 0.05 n) + 75
    assert [item["score"] for item in trend["scores"]] == [98.8, 97.5, 96.2]
    assert (trend["newest"], trend["median_before"], trend["change"]) == (96.2, pytest.approx(98.15), -2.0)
    assert history.compare(docs[:1], "gpu_xid")["score_trend"] is None
