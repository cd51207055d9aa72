# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Did time-to-recover regress? The last N drills of one experiment, compared, with their resiliency
scores and the newest score against the median of the earlier ones. Pure.

The newest drill that measured a time to recover is compared with the median of the earlier ones in
the window: the median, because one slow or lucky drill among a handful must not move the baseline.
It regressed when it is slower than that median by more than ``tolerance`` (0.2: 20 %). Drills without
the figure (dry runs, refusals, aborts, a loop that never recovered) are listed but not compared; the
verdict says so when the newest drills are among them, since a loop that stopped recovering at all is
worse news than a slow one.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.report import document

NOT_ENOUGH = "not enough drills"


def row(doc: Mapping[str, Any]) -> Dict[str, Any]:
    figures = document.metrics(doc)
    return {
        "id": doc.get("id"),
        "started_at": doc.get("started_at"),
        "result": doc.get("result"),
        "time_to_recover_s": document.number(figures.get("time_to_recover_s")),
        "steps_lost": figures.get("steps_lost"),
        # Drills from before the score have their steps: scored the same way on reading.
        "score": document.number(doc.get("score")) if doc.get("score") is not None
        else document.resiliency_score(doc),
    }


def window(docs: Sequence[Mapping[str, Any]], experiment: str, last: int) -> List[Dict[str, Any]]:
    """The rows of the last ``last`` drills of ``experiment``, oldest first."""
    mine = [doc for doc in docs if doc.get("experiment") == experiment]
    mine.sort(key=lambda doc: (document.number(doc.get("started_at")) or 0.0, str(doc.get("id"))))
    return [row(doc) for doc in mine[-last:]]


def compare(docs: Sequence[Mapping[str, Any]], experiment: str, last: int = 5,
            tolerance: float = 0.2) -> Dict[str, Any]:
    """{drills, regressed, why, figures}: figures is None when there was not enough to compare."""
    if not isinstance(last, int) or isinstance(last, bool) or last < 2:
        raise FieldError("last", "must be an integer of at least 2 (the newest drill and one to compare with)")
    if document.number(tolerance) is None or not math.isfinite(tolerance) or tolerance < 0:
        raise FieldError("tolerance", "must be a finite number of at least 0 (0.2 means 20 %)")
    rows = window(docs, experiment, last)
    trend = score_trend(rows)
    timed = [item for item in rows if item["time_to_recover_s"] is not None]
    if len(timed) < 2:
        return {"drills": rows, "regressed": False, "figures": None, "score_trend": trend,
                "why": "%s: %d of the last %d %s drills measured a time to recover; 2 are needed" % (
                    NOT_ENOUGH, len(timed), len(rows), experiment)}
    newest, earlier = timed[-1], timed[:-1]
    median = statistics.median(item["time_to_recover_s"] for item in earlier)
    limit = median * (1.0 + tolerance)
    # "By more than": a drill exactly at the limit passes, whatever the float rounding of median * 1.2.
    regressed = newest["time_to_recover_s"] > limit + 1e-9
    figures = {
        "newest": newest["id"], "newest_s": newest["time_to_recover_s"], "median_s": median,
        "limit_s": limit, "tolerance": float(tolerance), "compared": [item["id"] for item in earlier],
    }
    why = "%s recovered in %.1f s; the median of %s before it is %.1f s, so the limit with %g %% tolerance is " \
        "%.1f s: %s" % (newest["id"], newest["time_to_recover_s"], document.plural(len(earlier), "drill"), median,
                        tolerance * 100, limit, "regressed" if regressed else "no regression")
    position = next(index for index, item in enumerate(rows) if item is newest)
    skipped = rows[position + 1:]  # newer than the newest with a figure: none of them has one
    if skipped:
        why += " (newer drills without a time to recover: %s)" % ", ".join(
            "%s %s" % (item["id"], item["result"]) for item in skipped)
    return {"drills": rows, "regressed": regressed, "why": why, "figures": figures, "score_trend": trend}


def score_trend(rows: Sequence[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """The newest resiliency score against the median of the earlier ones in the window (None with
    fewer than two scored drills): {newest, median_before, change, scores}, oldest first."""
    scored = [(item["id"], item["score"]) for item in rows if item.get("score") is not None]
    if len(scored) < 2:
        return None
    median = statistics.median(score for _id, score in scored[:-1])
    return {"newest": scored[-1][1], "median_before": median, "change": round(scored[-1][1] - median, 1),
            "scores": [{"id": drill_id, "score": score} for drill_id, score in scored]}
