"""The Grafana dashboard (deploy/grafana/p2-dashboard.json) against the metrics
the service really exposes: every query names only metrics of
``optimizer_service.metrics.SERVICE``, every such metric but :data:`NO_PANEL` has a panel, and
every query is valid PromQL (``promtool check rules``, when promtool is installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from optimizer_service.metrics import SERVICE
from tests.support.cli import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "p2-dashboard.json"
METRIC_NAME = re.compile(r"\bp2_[a-z0-9_]+")
#: Concrete values for the dashboard's variables, so its queries are plain PromQL.
VARIABLES = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h", "job": "job-a"}
EXPOSED = {name: spec.name for spec in SERVICE for name in spec.exposed}
#: Service metrics the dashboard need not show: which replica leads is for alerts and ``up``-style queries;
#: the dashboard shows the jobs, whose series come from the leader alone.
NO_PANEL = {"p2_service_leader"}


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard: dict) -> list[dict]:
    """Every panel, those nested in collapsed rows included."""
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and every query variable."""
    found = [(f"panel {panel['id']} {panel['title']!r} target {target['refId']}", target["expr"])
             for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append((f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query))
    return found


def concrete(expr: str) -> str:
    """``expr`` with ``$var`` and ``${var}`` replaced by :data:`VARIABLES`' values."""
    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        assert name in VARIABLES, f"unknown dashboard variable ${name} in {expr}"
        return VARIABLES[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def test_the_dashboard_parses_and_is_a_grafana_dashboard():
    dashboard = load()
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    job = variables["job"]
    assert job["type"] == "query"
    assert job["query"]["query"] == "label_values(p2_iteration_seconds_count, job_id)"


def test_panels_have_unique_ids_titles_and_a_prometheus_datasource():
    all_panels = panels(load())
    ids = [panel["id"] for panel in all_panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    graphs = [panel for panel in all_panels if panel["type"] != "row"]
    assert len(graphs) >= 10
    for panel in all_panels:
        assert panel.get("title", "").strip(), f"panel {panel['id']} has no title"
    for panel in graphs:
        where = f"panel {panel['id']} {panel['title']!r}"
        assert panel.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel.get("targets"), f"{where} has no query"
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"]) == panel["datasource"], where
            assert target["expr"].strip(), f"{where} target {target['refId']} is empty"
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), f"{where}: duplicate refIds {ref_ids}"


def test_queries_use_only_the_services_metrics_and_every_metric_has_a_panel():
    dashboard = load()
    unknown = [(where, name) for where, expr in queries(dashboard) for name in METRIC_NAME.findall(expr)
               if name not in EXPOSED]
    assert not unknown, f"names that optimizer_service.metrics.SERVICE does not expose: {unknown}"
    used = {EXPOSED[name] for _, expr in queries(dashboard) for name in METRIC_NAME.findall(expr)}
    unused = sorted({spec.name for spec in SERVICE} - used - NO_PANEL)
    assert not unused, f"SERVICE metrics no panel shows: {unused}"
    for where, expr in queries(dashboard):
        assert METRIC_NAME.search(expr), f"{where} reads no p2_ metric: {expr}"


def test_job_metrics_are_filtered_by_the_job_variable():
    """A query of a metric with a ``job_id`` label honours the dashboard's job selector."""
    job_metrics = {name for spec in SERVICE if "job_id" in spec.labels for name in spec.exposed}
    for panel in panels(load()):
        for target in panel.get("targets", []):
            for name in set(METRIC_NAME.findall(target["expr"])) & job_metrics:
                assert re.search(rf'{name}\{{[^}}]*job_id=~"\$job"', target["expr"]), \
                    f"panel {panel['title']!r}: {name} is not filtered by $job in {target['expr']}"


def rules_file(dashboard: dict, folder: Path) -> Path:
    """Each panel query as a recording rule (JSON is YAML), variables made concrete."""
    rules = [{"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": concrete(target["expr"])}
             for panel in panels(dashboard) for target in panel.get("targets", [])]
    path = folder / "dashboard-rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "p2-dashboard", "rules": rules}]}, indent=1))
    return path


def promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus); PromQL syntax is not checked")
    return tool


def test_every_query_is_valid_promql(tmp_path):
    tool = promtool()
    path = rules_file(load(), tmp_path)
    result = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(panel.get("targets", [])) for panel in panels(load()))
    assert f"SUCCESS: {count} rules found" in result.stdout, result.stdout


def test_the_promql_check_rejects_a_broken_query(tmp_path):
    """The check above can fail: a panel with an unbalanced ``sum by`` is refused, by its record name."""
    tool = promtool()
    dashboard = load()
    broken = next(panel for panel in dashboard["panels"] if panel.get("targets"))
    broken["targets"][0]["expr"] = 'sum by (job_id (rate(p2_iteration_seconds_count{job_id=~"$job"}[$__rate_interval]))'
    path = rules_file(dashboard, tmp_path)
    result = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"dashboard:panel_{broken['id']}_A" in result.stderr and "parse error" in result.stderr, result.stderr


def test_concrete_replaces_every_variable_and_refuses_unknown_ones():
    assert concrete('rate(x{job=~"$job"}[$__rate_interval]) + y{job="${job}"}') == \
        'rate(x{job=~"job-a"}[1m]) + y{job="job-a"}'
    with pytest.raises(AssertionError, match=r"unknown dashboard variable \$instance"):
        concrete('up{instance="$instance"}')
