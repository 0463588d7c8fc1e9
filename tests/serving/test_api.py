"""``abstream serve`` as a client meets it: a real server process, in a Python that cannot
import pyspark, over results published from a small pipeline run. Every response is
validated against the OpenAPI document the server itself serves, and the results page is
driven in Debian's Chromium."""

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
from playwright.sync_api import Browser, Page, Route, sync_playwright

from abstream.api.app import finite
from abstream.config import ServingSettings
from abstream.io.postgres import Store
from abstream.io.postgres_local import LocalPostgres
from abstream.layout import Layout
from abstream.report.build import Report, dimension_reports
from abstream.report.publish import publish
from tests.helpers import WITHOUT_SPARK, store_environment, store_settings
from tests.servers import free_port

PUBLISHED = datetime(2026, 3, 2, 8, 30, tzinfo=UTC)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    #: The CPU seconds (user and system) the server had used when it first answered: on a
    #: machine the rest of the suite keeps busy, its wall time is the scheduler's.
    started_on_cpu: float

    def get(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw, status, got = response.read(), response.status, response.headers
        except urllib.error.HTTPError as error:
            raw, status, got = error.read(), error.code, error.headers
        return Answer(status, {k.lower(): v for k, v in got.items()},
                      json.loads(raw) if raw else None)


def _cpu_seconds(pid: int) -> float:
    """The user and system CPU seconds process ``pid`` has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(data: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    port = free_port()
    began = time.monotonic()
    process = subprocess.Popen([*WITHOUT_SPARK, "serve", "--data-dir", str(data),
                                "--port", str(port), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    server = Server(f"http://127.0.0.1:{port}", process, 0.0)
    while time.monotonic() - began < 30:
        assert process.poll() is None, process.communicate()
        try:
            if server.get("/healthz").status == 200:
                server.started_on_cpu = _cpu_seconds(process.pid)
                return server
        except OSError:
            time.sleep(0.05)
    raise AssertionError("serve did not answer within 30 s")


def stop(server: Server) -> str:
    server.process.send_signal(signal.SIGTERM)
    _, stderr = server.process.communicate(timeout=30)
    assert server.process.returncode == 0, stderr
    return stderr


@dataclass(frozen=True)
class Published:
    report: Report
    breakdowns: list[Report]
    layout: Layout
    server: Server
    store: Store | None


@pytest.fixture(scope="module")
def breakdowns(spark, served) -> list[Report]:
    return dimension_reports(spark, served.ctx.layout, served.ctx.config)


@pytest.fixture(scope="module", params=["delta", "postgres"])
def published(request, spark, served, breakdowns, tmp_path_factory) -> Iterator[Published]:
    """The shared small run's final report and its breakdowns by device and country,
    published into a data dir of their own (and, with ``postgres``, into the serving
    store, which the server then reads), and a server on it."""
    data = tmp_path_factory.mktemp("served") / "data"
    layout = Layout.of(data)
    store, env = None, None
    if request.param == "postgres":
        postgres = request.getfixturevalue("postgres")
        env = store_environment(postgres, "api")
        store = Store(ServingSettings.model_validate(
            store_settings(postgres, "api")).postgres)
    publish(spark, layout, served.final, PUBLISHED, breakdowns, store=store)
    server = start(data, env=env)
    yield Published(served.final, breakdowns, layout, server, store)
    stop(server)


def _conforms(server: Server, answer: Answer, schema: str) -> None:
    document = server.get("/api/v1/openapi.json").body
    root = {"$ref": f"#/components/schemas/{schema}", "components": document["components"]}
    jsonschema.Draft202012Validator.check_schema(root)
    jsonschema.validate(answer.body, root, cls=jsonschema.Draft202012Validator)


def test_it_starts_on_under_two_seconds_of_cpu_without_pyspark(published):
    assert published.server.started_on_cpu < 2.0, published.server.started_on_cpu


def test_the_list_has_every_experiment_and_population_with_its_times(published):
    server, report = published.server, published.report
    answer = server.get("/api/v1/experiments")
    assert answer.status == 200
    document = server.get("/api/v1/openapi.json").body
    jsonschema.validate(answer.body, {"type": "array",
                                      "items": {"$ref": "#/components/schemas/Summary"},
                                      "components": document["components"]},
                        cls=jsonschema.Draft202012Validator)
    expected = {(e.experiment_id, e.population): e for e in report.experiments}
    assert {(s["experiment_id"], s["population"]) for s in answer.body} == set(expected)
    for summary in answer.body:
        e = expected[(summary["experiment_id"], summary["population"])]
        assert summary["variants"] == [v.variant for v in e.variants]
        assert summary["final"] == e.final
        assert summary["computed_at"] == "2026-03-02T08:30:00Z"
        assert summary["data_through"] == report.as_of.isoformat().replace("+00:00", "Z")


def test_results_are_the_experiments_entry_of_report_json(published):
    server = published.server
    for e in published.report.experiments:
        answer = server.get(f"/api/v1/experiments/{e.experiment_id}/results"
                            f"?population={e.population}")
        assert answer.status == 200
        _conforms(server, answer, "Results")
        assert answer.body == finite(json.loads(json.dumps(e.to_dict())))
        assert answer.body["comparisons"], e.experiment_id


def test_a_breakdown_is_the_experiments_entries_of_report_json_by_the_dimension(published):
    server = published.server
    for breakdown in published.breakdowns:
        for e in published.report.experiments:
            answer = server.get(f"/api/v1/experiments/{e.experiment_id}/results"
                                f"?population={e.population}&dimension={breakdown.dimension}")
            assert answer.status == 200
            _conforms(server, answer, "Breakdown")
            expected = [x.to_dict() for x in breakdown.experiments
                        if (x.experiment_id, x.population) == (e.experiment_id, e.population)]
            assert expected
            assert answer.body == {
                "experiment_id": e.experiment_id, "population": e.population,
                "dimension": breakdown.dimension,
                "values": finite(json.loads(json.dumps(expected)))}


def test_the_timeseries_is_the_reports_lift_over_time(published):
    server = published.server
    e = next(x for x in published.report.experiments if x.population == "qualified")
    answer = server.get(f"/api/v1/experiments/{e.experiment_id}/timeseries"
                        "?population=qualified&metric=conversion_rate")
    assert answer.status == 200
    _conforms(server, answer, "Timeseries")
    points = answer.body["points"]
    assert [p["time"] for p in points] == [t.isoformat().replace("+00:00", "Z")
                                          for t in e.times]
    over_time = e.comparisons_over_time[("treatment", "conversion_rate")]
    for point, comparison, visitors in zip(points, over_time,
                                           e.visitors_over_time["control"], strict=True):
        assert point["visitors"]["control"] == visitors
        found = point["variants"]["treatment"]
        if comparison is None:
            assert found is None
            continue
        assert found["lift"] == pytest.approx(comparison.lift)
        assert (found["ci_low"], found["ci_high"]) == pytest.approx(
            (comparison.fixed_lift.low, comparison.fixed_lift.high))
        assert (found["sequential_ci_low"], found["sequential_ci_high"]) == pytest.approx(
            (comparison.sequential_lift.low, comparison.sequential_lift.high))
    assert points[-1]["variants"]["treatment"] is not None


@pytest.mark.parametrize(("path", "status", "parameter", "words"), [
    ("/api/v1/experiments/no_such/results", 404, None, "no experiment 'no_such'"),
    ("/api/v1/experiments/checkout_button/results?population=everyone", 400, "population",
     "'everyone' is not one of assigned, qualified"),
    ("/api/v1/experiments/checkout_button/results?populaton=assigned", 400, "populaton",
     "unknown parameter 'populaton'"),
    ("/api/v1/experiments/checkout_button/results?dimension=browser", 404, "dimension",
     "no breakdown by 'browser' is published (published: country, device)"),
    ("/api/v1/experiments/checkout_button/timeseries", 400, "metric", "metric is required"),
    ("/api/v1/experiments/checkout_button/timeseries?metric=nps", 400, "metric",
     "'nps' is not one of"),
    ("/api/v2/nothing", 404, None, "no such path: /api/v2/nothing"),
])
def test_a_wrong_request_says_what_was_wrong(published, path, status, parameter, words):
    answer = published.server.get(path)
    assert answer.status == status
    _conforms(published.server, answer, "Error")
    assert words in answer.body["error"]
    assert answer.body.get("parameter") == parameter


def test_the_etag_is_the_results_version_and_changes_when_they_are_published_again(
        published, spark):
    server, path = published.server, "/api/v1/experiments/checkout_button/results"
    first = server.get(path)
    etag = first.headers["etag"]
    assert server.get(path, {"If-None-Match": etag}).status == 304
    publish(spark, published.layout, published.report, datetime(2026, 3, 2, 9, tzinfo=UTC),
            published.breakdowns, store=published.store)
    again = server.get(path, {"If-None-Match": etag})
    assert again.status == 200
    assert again.headers["etag"] != etag
    assert again.body == first.body
    assert server.get("/api/v1/experiments").body[0]["computed_at"] == "2026-03-02T09:00:00Z"


def test_a_store_that_is_down_is_a_503_saying_so_and_serving_resumes_when_it_returns(
        tmp_path):
    postgres = LocalPostgres("s3cret-for-serve").start()
    server = start(tmp_path / "data", env=store_environment(postgres, "resuming"))
    try:
        assert server.get("/api/v1/experiments").body == []
        postgres.kill()
        answers = [server.get("/api/v1/experiments") for _ in range(2)]
        assert [a.status for a in answers] == [503, 503]
        assert "Connection refused" in answers[1].body["error"]
        assert not any("s3cret" in a.body["error"] for a in answers)
        postgres.start()
        assert server.get("/api/v1/experiments").status == 200
    finally:
        stop(server)
        postgres.remove()


def test_nothing_published_is_an_empty_list(tmp_path):
    server = start(tmp_path / "empty")
    try:
        answer = server.get("/api/v1/experiments")
        missing = server.get("/api/v1/experiments/checkout_button/results")
    finally:
        stop(server)
    assert (answer.status, answer.body) == (200, [])
    assert missing.status == 404


def test_another_address_needs_a_token_and_requests_without_it_get_401(tmp_path):
    refused = subprocess.run([*WITHOUT_SPARK, "serve", "--data-dir", str(tmp_path),
                              "--host", "0.0.0.0"],
                             capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "abstream: error: serve.host 0.0.0.0 can be reached from other machines: set a "
        "bearer token in serve.token (ABSTREAM__SERVE__TOKEN)"]
    token = "s3cret-t0ken"
    server = start(tmp_path, "--host", "0.0.0.0",
                   env={**os.environ, "ABSTREAM__SERVE__TOKEN": token})
    try:
        without = server.get("/api/v1/experiments")
        wrong = server.get("/api/v1/experiments", {"Authorization": "Bearer nope"})
        right = server.get("/api/v1/experiments", {"Authorization": f"Bearer {token}"})
    finally:
        stderr = stop(server)
    assert (without.status, wrong.status, right.status) == (401, 401, 200)
    assert without.headers["www-authenticate"] == "Bearer"
    assert "bearer token" in without.body["error"]
    assert token not in stderr


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, driven by Playwright (no browser download)."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=shutil.which("chromium"),
                                              args=["--no-sandbox"])
        yield launched
        launched.close()


def _lifts(page: Page) -> dict[tuple[str, str], float]:
    rows = page.eval_on_selector_all(
        "tr.comparison", "rows => rows.map(r => [r.dataset.metric, r.dataset.variant, "
                         "r.dataset.lift === undefined ? null : r.dataset.lift])")
    return {(metric, variant): float(lift) for metric, variant, lift in rows if lift}


def _api_lifts(server: Server, experiment: str, population: str) -> dict[tuple[str, str], float]:
    body = server.get(f"/api/v1/experiments/{experiment}/results?population={population}").body
    return {(c["metric"], c["variant"]): c["lift"] for c in body["comparisons"]
            if c["lift"] is not None}


def test_the_page_shows_the_published_results_and_requests_nothing_off_the_machine(
        published, browser, tmp_path):
    server = published.server
    page = browser.new_page(viewport={"width": 1100, "height": 1200})
    elsewhere: list[str] = []
    errors: list[str] = []

    def only_this_machine(route: Route) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_machine)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.url + "/")
    page.wait_for_selector("#experiments")
    listed = page.eval_on_selector_all(
        "#experiments tr[data-experiment]",
        "rows => rows.map(r => [r.dataset.experiment, r.children[1].textContent])")
    assert sorted(map(tuple, listed)) == sorted(
        (e.experiment_id, e.population) for e in published.report.experiments)

    experiment = "checkout_button"
    page.click(f"#experiments tr[data-experiment='{experiment}'] a >> nth=0")
    page.wait_for_selector("tr.comparison")
    assert "population=assigned" in page.url
    assert _lifts(page) == _api_lifts(server, experiment, "assigned")
    assert page.locator("#lift-chart").count() == 1

    page.select_option("select[name=population]", "qualified")
    page.wait_for_url("**population=qualified**")
    page.wait_for_selector(f"h1:has-text('{experiment} / qualified')")
    qualified = _api_lifts(server, experiment, "qualified")
    assert qualified != _api_lifts(server, experiment, "assigned")
    assert _lifts(page) == qualified

    page.select_option("select[name=dimension]", "device")
    page.wait_for_url("**dimension=device**")
    page.wait_for_selector("h2:has-text('device = ')")
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert elsewhere == []
    assert errors == []
