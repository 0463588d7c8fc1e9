"""The shipped Prometheus configuration, rules and dashboard, checked with promtool."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _promtool(*args: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (make test installs Debian's prometheus)")
    return subprocess.run([promtool, *args], capture_output=True, text=True, check=False,
                          cwd=DEPLOY / "prometheus", timeout=300)


def test_rules_and_config_are_valid():
    rules = sorted(str(p) for p in (DEPLOY / "prometheus" / "rules").glob("*.yml"))
    checked = _promtool("check", "rules", *rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = _promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


def test_the_seed_scenarios_replayed_against_the_rules():
    tests = sorted(str(p) for p in (DEPLOY / "prometheus" / "tests").glob("*.yml"))
    assert tests
    result = _promtool("test", "rules", *tests)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_dashboard_queries_only_what_abstream_exports():
    dashboard = json.loads((DEPLOY / "grafana" / "abstream-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert len(exprs) >= 15
    for expr in exprs:
        assert "abstream" in expr or "delta_version" in expr or "spark_delta" in expr, expr


def test_dashboard_has_an_experiments_row():
    dashboard = json.loads((DEPLOY / "grafana" / "abstream-dashboard.json").read_text())
    rows = [p for p in dashboard["panels"] if p["type"] == "row"]
    assert any("Experiments" in row["title"] for row in rows)
    exprs = " ".join(t["expr"] for panel in dashboard["panels"]
                     for t in panel.get("targets", []))
    for metric in ("srm_p_value", "visitors", "lift", "lift_ci_low", "lift_ci_high",
                   "p_value_adjusted", "results_published_timestamp_seconds"):
        assert f"abstream_experiment_{metric}" in exprs, metric
