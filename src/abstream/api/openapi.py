"""The API's OpenAPI 3.1 document (``/api/v1/openapi.json``): what every response holds.
The tests validate every response against it."""

from __future__ import annotations

from typing import Any

from abstream import __version__
from abstream.topology import POPULATIONS


def _number() -> dict[str, Any]:
    return {"type": ["number", "null"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Any], required: list[str] | None = None,
            *, open_: bool = False) -> dict[str, Any]:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required,
            "additionalProperties": open_}


_TIME = {"type": "string", "format": "date-time", "pattern": "Z$"}
_BOUNDS = ("ci_low", "ci_high", "sequential_ci_low", "sequential_ci_high")
_COMPARISON = _object({
    "variant": {"type": "string"}, "metric": {"type": "string"},
    "role": {"enum": ["primary", "secondary", "guardrail"]},
    "control_value": {"type": "number"}, "variant_value": {"type": "number"},
    "lift": _number(), "ci_low": _number(), "ci_high": _number(), "p_value": _number(),
    "difference": {"type": "number"},
    "difference_ci_low": _number(), "difference_ci_high": _number(),
    "sequential_ci_low": _number(), "sequential_ci_high": _number(),
    "sequential_difference_ci_low": _number(), "sequential_difference_ci_high": _number(),
    "sequential_p_value": _number(), "sequential_significant": {"type": "boolean"},
    "p_value_adjusted": _number(), "significant": {"type": "boolean"}, "mde": _number()})
_VARIANT = _object({"variant": {"type": "string"}, "visitors": {"type": "integer"}},
                   open_=True)
_RESULTS = _object({
    "experiment_id": {"type": "string"}, "population": {"enum": list(POPULATIONS)},
    "value": {"type": "string"}, "final": {"type": "boolean"},
    "srm_p_value": _number(), "srm_flagged": {"type": "boolean"},
    "allocation": {"type": "object", "additionalProperties": {"type": "number"}},
    "variants": {"type": "array", "items": _ref("Variant")},
    "comparisons": {"type": "array", "items": _ref("Comparison")},
}, required=["experiment_id", "population", "final", "srm_p_value", "srm_flagged",
             "allocation", "variants", "comparisons"])
_BREAKDOWN = _object({
    "experiment_id": {"type": "string"}, "population": {"enum": list(POPULATIONS)},
    "dimension": {"type": "string"},
    "values": {"type": "array", "items": _ref("Results")}})
_SUMMARY = _object({
    "experiment_id": {"type": "string"}, "population": {"enum": list(POPULATIONS)},
    "variants": {"type": "array", "items": {"type": "string"}},
    "final": {"type": "boolean"},
    "data_through": {"oneOf": [_TIME, {"type": "null"}]}, "computed_at": _TIME,
    "dimensions": {"type": "array", "items": {"type": "string"}}})
_POINT = _object({
    "time": _TIME,
    "visitors": {"type": "object", "additionalProperties": {"type": "integer"}},
    "variants": {"type": "object", "additionalProperties": {"oneOf": [
        _object({"lift": _number(), **{b: _number() for b in _BOUNDS}}),
        {"type": "null"}]}}})
_TIMESERIES = _object({
    "experiment_id": {"type": "string"}, "population": {"enum": list(POPULATIONS)},
    "metric": {"type": "string"}, "points": {"type": "array", "items": _ref("Point")}})
_ERROR = _object({"error": {"type": "string"}, "parameter": {"type": "string"}},
                 required=["error"])


def _response(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _query(name: str, description: str, *, required: bool = False,
           schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": description,
            "schema": schema or {"type": "string"}}


_ERRORS = {"400": _response("a bad parameter", _ref("Error")),
           "401": _response("no or a wrong bearer token", _ref("Error")),
           "404": _response("no such experiment or population published", _ref("Error"))}
_NOT_MODIFIED = {"304": {"description": "unchanged since the ETag given in If-None-Match"}}
_EXPERIMENT_ID = {"name": "experiment_id", "in": "path", "required": True,
                  "schema": {"type": "string"}}
_POPULATION = _query("population", "assigned (default) or qualified",
                     schema={"enum": list(POPULATIONS), "default": POPULATIONS[0]})

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "abstream results", "version": __version__,
             "description": "Experiment results as `abstream report --publish` last "
                            "published them. Every response carries the results table's "
                            "version as its ETag."},
    "paths": {
        "/api/v1/experiments": {"get": {
            "summary": "every experiment and population published",
            "responses": {"200": _response("the list (empty before anything is published)",
                                           {"type": "array", "items": _ref("Summary")}),
                          **_NOT_MODIFIED, "401": _ERRORS["401"]}}},
        "/api/v1/experiments/{experiment_id}/results": {"get": {
            "summary": "an experiment's results: its entry in `abstream report --json`, "
                       "or with `dimension` its entries in `abstream report --json --by "
                       "DIMENSION`",
            "parameters": [_EXPERIMENT_ID, _POPULATION,
                           _query("dimension", "a declared dimension: the results per "
                                               "value")],
            "responses": {"200": _response("the results", {"oneOf": [
                _ref("Results"), _ref("Breakdown")]}),
                          **_NOT_MODIFIED, **_ERRORS}}},
        "/api/v1/experiments/{experiment_id}/timeseries": {"get": {
            "summary": "a metric's cumulative lift over time, with its fixed interval and "
                       "its confidence sequence per point and variant",
            "parameters": [_EXPERIMENT_ID, _POPULATION,
                           _query("metric", "a metric of the catalog", required=True)],
            "responses": {"200": _response("the series", _ref("Timeseries")),
                          **_NOT_MODIFIED, **_ERRORS}}},
        "/healthz": {"get": {
            "summary": "the server is up (no token needed)",
            "responses": {"200": _response("up", _object({"status": {"const": "ok"}}))}}},
    },
    "components": {
        "schemas": {"Summary": _SUMMARY, "Results": _RESULTS, "Breakdown": _BREAKDOWN,
                    "Variant": _VARIANT,
                    "Comparison": _COMPARISON, "Timeseries": _TIMESERIES, "Point": _POINT,
                    "Error": _ERROR},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    },
    "security": [{}, {"bearer": []}],
}
