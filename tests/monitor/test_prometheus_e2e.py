"""Prometheus scrapes the exporter while a real component is stopped, fed and restarted;
the lag it stores matches the truth within 1 s plus the scrape interval."""

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from abstream.generator.write import GeneratorSettings, generate
from abstream.monitor.exporter import Exporter
from abstream.speed import COMPONENTS
from abstream.speed.runner import pipeline, run_once
from tests.helpers import make_config, wait_until
from tests.servers import free_port, prometheus

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SCRAPE_SECONDS = 1.0


def api(address: str, path: str, **params) -> dict:
    url = f"http://{address}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def lag_series(address, start, end, source):
    data = api(address, "query_range",
               query=f'abstream_component_lag_seconds{{component="sessionize",source="{source}"}}',
               start=start, end=end, step=0.5)
    return [(float(t), float(v)) for t, v in data["result"][0]["values"]] if data["result"] \
        else []


@pytest.mark.slow
def test_stopped_fed_restarted(spark, tmp_path, capsys):
    config = make_config(tmp_path / "data", monitor={"exporter": {"port": free_port()}})
    landing = Path(config.data_dir) / "landing"
    generate(GeneratorSettings(events=800, seed=2, file_events=400), landing)
    exporter = Exporter(config)
    _, port = exporter.serve()
    rules = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
    try:
        with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"], rules) as address, \
                pipeline(config, [exporter.queries.observe]) as ctx:
            events = ctx.layout.events
            run_once(ctx, [COMPONENTS["ingest"], COMPONENTS["sessionize"]])

            def current():
                data = api(address, "query", query=(
                    f'abstream_component_lag_seconds{{component="sessionize",'
                    f'source="{events}"}}'))
                return float(data["result"][0]["value"][1]) if data["result"] else None

            wait_until(lambda: current() == 0.0, "a lag of 0 in Prometheus")
            # sessionize is stopped; new beacons arrive and ingest commits them to bronze.
            generate(GeneratorSettings(events=200, seed=3), landing)
            run_once(ctx, [COMPONENTS["ingest"]])
            log = Path(events, "_delta_log")
            newest = max(log.glob("*.json"), key=lambda p: int(p.name[:20]))
            committed = newest.stat().st_mtime
            time.sleep(8)
            restarted = time.time()
            run_once(ctx, [COMPONENTS["sessionize"]])
            wait_until(lambda: current() == 0.0, "the lag back to 0 in Prometheus")
            caught_up = time.time()

            series = lag_series(address, committed, caught_up + 2, events)
            behind = [(t, v) for t, v in series if committed + SCRAPE_SECONDS < t < restarted]
            assert len(behind) >= 10
            errors = [abs(v - (t - committed)) for t, v in behind]
            worst = max(errors)
            # The raw samples, each at its own scrape time: the monitor's own error.
            window = int(time.time() - committed) + 5
            raw = api(address, "query", query=(
                f'abstream_component_lag_seconds{{component="sessionize",source="{events}"}}'
                f'[{window}s]'))["result"][0]["values"]
            at_scrape = [abs(float(v) - (float(t) - committed)) for t, v in raw
                         if committed < float(t) < restarted and float(v) > 0]
            with capsys.disabled():
                print(f"\nlargest |reported - true| lag over {len(behind)} query points: "
                      f"{worst:.3f} s (scrape interval {SCRAPE_SECONDS} s); over "
                      f"{len(at_scrape)} raw samples at their scrape time: "
                      f"{max(at_scrape):.3f} s")
            assert worst <= 1 + SCRAPE_SECONDS
            assert max(at_scrape) < 0.25
            assert all(v == 0.0 for t, v in series if t > caught_up + SCRAPE_SECONDS)

            dashboard = json.loads((DEPLOY / "grafana" / "abstream-dashboard.json").read_text())
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    api(address, "query", query=target["expr"])
            alerts = api(address, "rules", type="alert")
            assert {r["name"] for g in alerts["groups"] for r in g["rules"]} >= {
                "AbstreamComponentLagHigh", "AbstreamComponentStalled",
                "AbstreamExperimentGuardrailHarmed", "AbstreamExperimentResultsStale"}
    finally:
        exporter.stop()
