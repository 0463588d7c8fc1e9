"""The results API: a Starlette application over the published results.

Every answer is computed from the results table's latest version, read without Spark, and
carries that version as its ETag (a request whose ``If-None-Match`` holds it gets 304). An
unknown experiment or population is a 404, a bad parameter a 400, each a JSON body naming
what was wrong; before anything is published the experiments list is empty.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import math
from collections.abc import Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from abstream.api.openapi import DOCUMENT
from abstream.api.published import Entry, Published, Source
from abstream.errors import AbstreamError
from abstream.topology import POPULATIONS

#: What needs no token: the probe.
OPEN_PATHS = ("/healthz",)


class ApiError(Exception):
    """An answer that is not the resource: its status and what was wrong."""

    def __init__(self, status: int, message: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.parameter = parameter

    def body(self) -> dict[str, str]:
        named = {} if self.parameter is None else {"parameter": self.parameter}
        return {"error": str(self), **named}


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity made null (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(finite(content), allow_nan=False, separators=(",", ":")).encode()


def _error(error: ApiError) -> Response:
    return Json(error.body(), status_code=error.status)


class BearerToken:
    """Every request but those of ``OPEN_PATHS`` must carry ``Authorization: Bearer
    TOKEN``; others get 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = Json({"error": "a bearer token is required (Authorization: "
                                          "Bearer TOKEN)"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _parameters(request: Request, allowed: tuple[str, ...]) -> dict[str, str]:
    unknown = sorted(set(request.query_params) - set(allowed))
    if unknown:
        raise ApiError(400, f"unknown parameter {unknown[0]!r} (this path takes "
                            f"{', '.join(allowed) or 'none'})", unknown[0])
    return dict(request.query_params)


def _entry(published: Published, request: Request, given: dict[str, str]) -> Entry:
    experiment = request.path_params["experiment_id"]
    population = given.get("population", POPULATIONS[0])
    if population not in POPULATIONS:
        raise ApiError(400, f"population {population!r} is not one of "
                            f"{', '.join(POPULATIONS)}", "population")
    if experiment not in published.experiments():
        raise ApiError(404, f"no experiment {experiment!r} is published")
    entry = published.entries.get((experiment, population))
    if entry is None:
        raise ApiError(404, f"experiment {experiment!r} has no {population} population "
                            f"published", "population")
    return entry


def _experiments(published: Published, request: Request) -> Any:
    _parameters(request, ())
    return [entry.summary() for entry in published.entries.values()]


def _results(published: Published, request: Request) -> Any:
    given = _parameters(request, ("population", "dimension"))
    entry = _entry(published, request, given)
    if "dimension" not in given:
        return entry.results
    dimension = given["dimension"]
    if dimension not in entry.breakdowns:
        raise ApiError(404, f"no breakdown by {dimension!r} is published (published: "
                            f"{', '.join(sorted(entry.breakdowns)) or 'none'})", "dimension")
    return {"experiment_id": entry.experiment_id, "population": entry.population,
            "dimension": dimension, "values": entry.breakdowns[dimension]}


def _timeseries(published: Published, request: Request) -> Any:
    given = _parameters(request, ("population", "metric"))
    entry = _entry(published, request, given)
    metric = given.get("metric")
    series = entry.series
    if not metric:
        raise ApiError(400, "metric is required", "metric")
    if metric not in series["metrics"]:
        raise ApiError(400, f"metric {metric!r} is not one of "
                            f"{', '.join(sorted(series['metrics'])) or 'none'}", "metric")
    by_variant = series["metrics"][metric]
    points = [{"time": time,
               "visitors": {v: counts[i] for v, counts in series["visitors"].items()},
               "variants": {v: values[i] for v, values in by_variant.items()}}
              for i, time in enumerate(series["times"])]
    return {"experiment_id": entry.experiment_id, "population": entry.population,
            "metric": metric, "points": points}


#: The results page's files (``resources/web``) and their media types.
_PAGE_FILES = {"index.html": "text/html; charset=utf-8",
               "app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}


def _page() -> dict[str, Response]:
    """The results page's responses, by path: ``/`` and its script and style, all served
    from the package (the page requests nothing from any other host)."""
    folder = resources.files("abstream") / "resources" / "web"
    served = {name: Response((folder / name).read_bytes(), media_type=kind)
              for name, kind in _PAGE_FILES.items()}
    return {"/": served["index.html"], "/static/app.js": served["app.js"],
            "/static/app.css": served["app.css"]}


def reachable_from_elsewhere(host: str) -> bool:
    """Whether binding ``host`` lets other machines connect (anything but loopback)."""
    try:
        return host != "localhost" and not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def create_app(published: Source, token: str | None = None) -> ASGIApp:
    """The API over the ``published`` results (``PublishedResults``, ``StoredResults``);
    with ``token``, every request but ``/healthz`` must carry it. While the results cannot
    be read (the serving store is down), the answer is a 503 saying why."""

    def versioned(build: Callable[[Published, Request], Any]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                current = published.latest()
            except AbstreamError as exc:
                return _error(ApiError(503, str(exc)))
            etag = f'"{"none" if current.version is None else current.version}"'
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers={"ETag": etag})
            try:
                return Json(build(current, request), headers={"ETag": etag})
            except ApiError as error:
                return _error(error)

        return endpoint

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return _error(ApiError(status, f"no such path: {request.url.path}" if status == 404
                               else f"{request.method} is not allowed here"))

    page = _page()
    app: ASGIApp = Starlette(
        routes=[
            *(Route(path, lambda _, r=response: r) for path, response in page.items()),
            Route("/healthz", lambda _: Json({"status": "ok"})),
            Route("/api/v1/openapi.json", lambda _: Json(DOCUMENT)),
            Route("/api/v1/experiments", versioned(_experiments)),
            Route("/api/v1/experiments/{experiment_id}/results", versioned(_results)),
            Route("/api/v1/experiments/{experiment_id}/timeseries", versioned(_timeseries)),
        ],
        exception_handlers={404: not_found, 405: not_found})
    if token is not None:
        app = BearerToken(app, token)
    return app
