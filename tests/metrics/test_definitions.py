"""The metric language: what a definition may say, its parts and fingerprint, the default
catalog, and ``abstream metrics``."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from abstream.cli import main
from abstream.config import Config, EventsSettings, catalog_problems, load_config
from abstream.errors import ConfigError
from abstream.metrics.catalog import default_catalog, problems
from abstream.metrics.definitions import Catalog, Definition, Dimension, MetricWindow


def _definition(**fields) -> Definition:
    return Definition.model_validate({"name": "m", **fields})


def test_the_default_catalog_is_the_five_comparisons_of_the_beacon():
    catalog = default_catalog()
    assert [(d.name, d.kind, d.role, d.better) for d in catalog.definitions] == [
        ("conversion_rate", "ratio", "primary", "higher"),
        ("revenue_per_visitor", "mean", "secondary", "higher"),
        ("bounce_rate", "ratio", "guardrail", "lower"),
        ("error_visit_rate", "ratio", "guardrail", "lower"),
        ("average_order_value", "ratio", "secondary", "higher"),
    ]
    assert catalog.parts() == ("bounce_visits", "error_visits", "visits", "count[order]",
                               "sum_revenue[order]")
    assert catalog.dimensions == []
    assert Config().metrics.catalog == catalog


def test_shorthands_mean_the_same_as_the_long_forms():
    short = _definition(kind="mean", events="order", value="revenue")
    long = _definition(kind="mean", events={"type": ["order"]}, value="revenue")
    assert short == long
    assert short.parts() == ("sum_revenue[order]",)


def test_part_keys_say_what_is_counted_and_a_filter_with_conditions_gets_a_digest():
    plain = _definition(kind="mean", events={"type": ["b", "a"]})
    assert plain.parts() == ("count[a,b]",)
    anything = _definition(kind="proportion", events={})
    assert anything.parts() == ("count[*]",)
    where = _definition(kind="mean", events={"type": "order", "where": {"units": {"ge": 2}}})
    other = _definition(kind="mean", events={"type": "order", "where": {"units": {"ge": 3}}})
    assert where.parts()[0].startswith("count[order]#")
    assert where.parts() != other.parts()


def test_the_fingerprint_changes_with_the_numbers_not_with_words_or_roles():
    base = _definition(kind="mean", events="order", value="revenue")
    assert base.fingerprint == _definition(
        kind="mean", events="order", value="revenue", role="guardrail", better="lower",
        description="words").fingerprint
    assert base.fingerprint == _definition(
        name="other", kind="mean", events="order", value="revenue").fingerprint
    changed = [_definition(kind="mean", events="order", value="units"),
               _definition(kind="mean", events="order", value="revenue", unit="visit"),
               _definition(kind="mean", events="order", value="revenue", cap={"absolute": 5}),
               _definition(kind="mean", events="order", value="revenue", min_units=50)]
    assert len({base.fingerprint, *(d.fingerprint for d in changed)}) == 5


@pytest.mark.parametrize(("fields", "message"), [
    ({"kind": "ratio", "numerator": {"events": "order"}},
     "a ratio needs numerator and denominator"),
    ({"kind": "ratio", "events": "order", "numerator": {"events": "order"},
      "denominator": {"visits": "all"}}, "a ratio has numerator and denominator, not events"),
    ({"kind": "mean"}, "give events (a filter) or visits"),
    ({"kind": "mean", "events": "order", "visits": "all"}, "give events (a filter) or visits"),
    ({"kind": "mean", "visits": "bounce", "value": "revenue"}, "give events too"),
    ({"kind": "proportion", "events": "order", "value": "revenue"}, "no value"),
    ({"kind": "proportion", "events": "order", "cap": {"absolute": 1}}, "no cap"),
    ({"kind": "mean", "events": "order", "numerator": {"events": "order"}},
     "numerator is for a ratio"),
    ({"kind": "mean", "events": "order", "cap": {"absolute": 1, "percentile": 0.9}},
     "give absolute or percentile"),
    ({"kind": "mean", "events": "order", "cap": {"percentile": 1.5}}, "less than 1"),
    ({"kind": "mean", "events": {"where": {"units": {}}}}, "a condition needs one of"),
    ({"kind": "mean", "events": "order", "min_units": 1}, "greater than or equal to 2"),
    ({"kind": "median", "events": "order"}, "'proportion', 'mean', 'ratio' or 'quantile'"),
    ({"kind": "quantile", "events": "pageview", "value": "page_load_ms"},
     "a quantile needs quantile (0 < q < 1)"),
    ({"kind": "mean", "events": "order", "quantile": 0.5}, "only a quantile has it"),
    ({"kind": "quantile", "events": "pageview", "quantile": 0.9}, "give events and value"),
    ({"kind": "quantile", "events": "order", "value": "revenue", "quantile": 0.9,
      "cap": {"absolute": 5}}, "a quantile takes no cap"),
    ({"kind": "quantile", "events": "order", "value": "revenue", "quantile": 1},
     "less than 1"),
    ({"kind": "mean", "events": "order", "window": {"length": "0 seconds"}},
     "length must be positive"),
    ({"kind": "mean", "events": "order", "window": {"length": "7 parsecs"}},
     "unknown time unit"),
    ({"name": "Conversion Rate", "kind": "mean", "events": "order"}, "use lower-case"),
    ({"kind": "mean", "events": "order", "colour": "red"}, "Extra inputs"),
])
def test_a_definition_that_cannot_work_is_refused_with_the_reason(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _definition(**fields)


def test_names_are_distinct():
    one = {"name": "m", "kind": "mean", "events": "order"}
    with pytest.raises(ValueError, match="two definitions are named 'm'"):
        Catalog.model_validate({"definitions": [one, one]})
    device = {"name": "device", "property": "device"}
    with pytest.raises(ValueError, match="two dimensions are named 'device'"):
        Catalog.model_validate({"definitions": [one], "dimensions": [device, device]})


def test_windows_and_quantiles_read_each_event_and_say_so_in_their_keys():
    windowed = _definition(kind="ratio", numerator={"events": "order"},
                           denominator={"visits": "all"}, window={"length": "7 days"})
    assert windowed.parts() == ("list:count[order]", "visits")
    p95 = _definition(kind="quantile", events="pageview", value="page_load_ms", quantile=0.95)
    assert p95.parts() == ("list:sum_page_load_ms[pageview]",)
    catalog = Catalog(definitions=[windowed, p95.model_copy(update={"name": "p95"})])
    assert set(catalog.listed_parts()) == {"list:count[order]",
                                           "list:sum_page_load_ms[pageview]"}
    assert catalog.event_parts() == {}
    assert windowed.fingerprint != windowed.model_copy(
        update={"window": MetricWindow(length=timedelta(days=1))}).fingerprint


def test_problems_name_the_definition_and_the_key_one_line_each():
    found = problems({"definitions": [
        {"name": "spend", "kind": "mean", "events": "order", "cap": {"absolute": -1}},
        {"kind": "mean", "events": "order"},
        {"name": "ok", "kind": "mean", "events": "order"},
        {"name": "share", "kind": "proportion", "events": {"type": "order", "where": {
            "units": {"gt": "many"}}}},
    ]})
    assert found == [
        "definition 'spend': cap.absolute: Input should be greater than 0",
        "definition #2: name: Field required",
        "definition 'share': events.where.units.gt: Input should be a valid number, unable "
        "to parse string as a number",
    ]


def test_what_a_catalog_reads_must_be_in_the_input_mapping():
    catalog = Catalog.model_validate({"definitions": [
        {"name": "buy", "kind": "proportion", "events": "purchase"},
        {"name": "pages", "kind": "mean", "events": "order", "value": "page"},
        {"name": "cheap", "kind": "ratio",
         "numerator": {"events": {"where": {"colour": {"equals": "red"}}}},
         "denominator": {"events": {"where": {"page": {"lt": 3}}}}},
    ]})
    assert catalog_problems(catalog, EventsSettings()) == [
        "definition 'buy': events.type: 'purchase' is not one of the event types "
        "(pageview, add_to_cart, order, error)",
        "definition 'pages': value: page is a string, not a number",
        "definition 'cheap': numerator.events.where: 'colour' is not one of "
        "events.properties (page, device, country, revenue, units, page_load_ms)",
        "definition 'cheap': denominator.events.where.page: lt, le, gt and ge compare "
        "numbers, and page is a string",
    ]
    without_device = EventsSettings().model_copy(update={"properties": {
        k: v for k, v in EventsSettings().properties.items() if k != "device"}})
    by_device = Catalog(definitions=default_catalog().definitions,
                        dimensions=[Dimension(name="device", property="device")])
    assert catalog_problems(by_device, without_device) == [
        "dimension 'device': property: 'device' is not one of events.properties (page, "
        "country, revenue, units, page_load_ms)"]


def test_a_config_whose_catalog_does_not_fit_its_events_is_one_line(tmp_path):
    path = tmp_path / "abstream.yaml"
    path.write_text(yaml.safe_dump({"metrics": {"definitions": [
        {"name": "buy", "kind": "proportion", "events": "purchase"}]}}))
    with pytest.raises(ConfigError, match=r"^config: metrics: definition 'buy': "
                                          r"events.type: 'purchase' is not one"):
        load_config(path, environ={})
    path.write_text(yaml.safe_dump({"report": {"metrics": {"conversion": "primary"}}}))
    with pytest.raises(ConfigError, match="report: metrics: 'conversion' is not a metric"):
        load_config(path, environ={})


def test_abstream_metrics_prints_the_catalog_and_yaml_that_reads_back(capsys, tmp_path,
                                                                      spark):
    assert main(["metrics"]) == 0
    assert spark.range(3).count() == 3, "main leaves the caller's session running"
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["name", "kind", "unit", "role", "better", "fingerprint",
                                "parts"]
    assert table[2].split()[:2] == ["conversion_rate", "ratio"]
    assert main(["metrics", "--yaml"]) == 0
    printed = tmp_path / "catalog.yaml"
    printed.write_text(capsys.readouterr().out)
    assert Catalog.model_validate(yaml.safe_load(printed.read_text())) == default_catalog()
    assert main(["metrics", "--check", str(printed)]) == 0
    assert capsys.readouterr().out == f"{printed}: 5 definitions, no problem\n"


def test_abstream_metrics_check_prints_a_line_per_problem_and_exits_2(capsys, tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text(yaml.safe_dump({"metrics": {"definitions": [
        {"name": "buy", "kind": "proportion", "events": "purchase"},
        {"name": "pages", "kind": "mean", "events": "order", "value": "page"}]}}))
    assert main(["metrics", "--check", str(bad)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{bad}: definition 'buy': events.type:")
    assert lines[1] == f"{bad}: definition 'pages': value: page is a string, not a number"
    assert main(["metrics", "--check", str(Path(tmp_path / "missing.yaml"))]) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = tmp_path / "empty.yaml"
    empty.write_text("metrics: {}\n")
    assert main(["metrics", "--check", str(empty)]) == 2
    assert "no definitions" in capsys.readouterr().err
