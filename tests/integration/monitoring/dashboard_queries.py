"""The PromQL of a Grafana dashboard: extract it, fill in Grafana's variables, run it on a Prometheus.

test_dashboard.py runs every query of roles/monitoring/files/dashboards/gpufleet-fleet.json on a
throwaway Prometheus; a lab test can run the same queries on the lab's Prometheus after it
injected a fault:

    from dashboard_queries import panel_queries, run_queries
    for query, reply in run_queries("http://127.0.0.1:19090"):
        assert reply["status"] == "success", (query.panel, reply)
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "roles" / "monitoring" / "files" / "dashboards" / "gpufleet-fleet.json"

# Grafana's macros, with values that suit a Prometheus scraping every 1 s to 30 s.
DEFAULT_MACROS = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m", "__range_s": "300"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@dataclass(frozen=True)
class PanelQuery:
    panel: str        # the panel's title ("annotation: <name>" for an annotation query)
    ref_id: str
    expr: str         # as written in the dashboard, with Grafana's variables
    instant: bool


def load(dashboard: Union[Path, str, Mapping[str, Any]] = DASHBOARD) -> Mapping[str, Any]:
    if isinstance(dashboard, Mapping):
        return dashboard
    return json.loads(Path(dashboard).read_text())


def _panels(panels: List[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        # Rows (collapsed ones in particular) hold their own panels.
        yield from _panels(panel.get("panels") or [])


def panel_queries(dashboard: Union[Path, str, Mapping[str, Any]] = DASHBOARD) -> List[PanelQuery]:
    """Every PromQL expression of the dashboard: panel targets, then annotation queries."""
    board = load(dashboard)
    found = [PanelQuery(panel=panel.get("title", ""), ref_id=target.get("refId", ""), expr=target["expr"],
                        instant=bool(target.get("instant")))
             for panel in _panels(board.get("panels") or []) for target in panel.get("targets") or []
             if target.get("expr")]
    found += [PanelQuery(panel="annotation: " + annotation.get("name", ""), ref_id="", expr=annotation["expr"],
                         instant=False)
              for annotation in (board.get("annotations") or {}).get("list") or [] if annotation.get("expr")]
    return found


def template_variables(dashboard: Union[Path, str, Mapping[str, Any]] = DASHBOARD) -> Dict[str, str]:
    """Each query variable at "All" (its allValue, else .*); the datasource variable is not PromQL."""
    board = load(dashboard)
    return {var["name"]: var.get("allValue") or ".*"
            for var in (board.get("templating") or {}).get("list") or [] if var.get("type") != "datasource"}


def render(expr: str, variables: Optional[Mapping[str, str]] = None, **macros: str) -> str:
    """expr with $var, ${var} and ${var:format} and Grafana's $__ macros replaced; unknown ones fail."""
    values = dict(DEFAULT_MACROS, **{"__" + key.lstrip("_"): value for key, value in macros.items()})
    values.update(variables or {})

    def substitute(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError("%r uses $%s, which is neither a dashboard variable nor a known macro" % (expr, name))
        return values[name]

    return _VARIABLE.sub(substitute, expr)


def query(base_url: str, expr: str, timeout: float = 10.0) -> Dict[str, Any]:
    """Prometheus's /api/v1/query reply, also for a 4xx/5xx (status "error", errorType, error)."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as exc:
        return json.load(exc)


def run_queries(base_url: str, dashboard: Union[Path, str, Mapping[str, Any]] = DASHBOARD,
                variables: Optional[Mapping[str, str]] = None,
                **macros: str) -> List[Tuple[PanelQuery, Dict[str, Any]]]:
    """Run every query of the dashboard as an instant query; (query, reply) pairs in dashboard order."""
    values = dict(template_variables(dashboard), **(variables or {}))
    return [(pq, query(base_url, render(pq.expr, values, **macros))) for pq in panel_queries(dashboard)]


def metric_names(expr: str) -> List[str]:
    """The gpufleet_* metric names an expression reads (for checks against the agent's contract)."""
    return sorted(set(re.findall(r"\b(gpufleet_[a-z_]+)\b", expr)))
