"""The report as text: a block per experiment and population."""

from __future__ import annotations

from abstream.rendering import render_table
from abstream.report.build import ExperimentReport, MetricComparison, Report, VariantReport


def value(rate: bool, number: float | None) -> str:
    """A metric's value: a percentage for a rate, else a number with two decimals."""
    if number is None:
        return "-"
    return f"{number:.2%}" if rate else f"{number:,.2f}"


def percent(number: float | None, signed: bool = True) -> str:
    if number is None:
        return "-"
    return f"{number:+.1%}" if signed else f"{number:.1%}"


def p_value(number: float | None) -> str:
    if number is None:
        return "-"
    return f"{number:.1e}" if number < 1e-3 else f"{number:.3f}"


def interval(c: MetricComparison) -> str:
    shown = c.interval
    if shown is None:
        return "-"
    return f"[{percent(shown.low)}, {percent(shown.high)}]"


def absolute(rate: bool, number: float) -> str:
    """An absolute difference: percentage points for rates, a number otherwise."""
    return f"{number * 100:.2f} pp" if rate else f"{number:,.2f}"


def title(e: ExperimentReport, dimension: str | None) -> str:
    """``experiment / population``, and ``/ dimension=value`` in a breakdown."""
    segment = "" if e.segment is None else f" / {dimension}={e.segment}"
    return f"{e.experiment_id} / {e.population}{segment}"


def status(e: ExperimentReport) -> str:
    return "final" if e.final else "provisional"


def srm_line(e: ExperimentReport) -> str:
    if e.srm_p_value is None:
        return "SRM: not checked"
    weights = ", ".join(f"{v} {w:g}" for v, w in e.weights.items())
    mark = "  MISMATCH: the split is not the allocation" if e.srm_flagged else ""
    return f"SRM p = {p_value(e.srm_p_value)} (allocation {weights}){mark}"


def variant_row(v: VariantReport) -> tuple[str, ...]:
    d = v.to_dict()
    return (v.variant, f"{d['visitors']:,}", f"{d['visits']:,}", percent(d["bounce_rate"], False),
            f"{d['orders']:,}", f"{d['units']:,}", value(True, d["conversion_rate"]),
            f"{d['revenue']:,.2f}", value(False, d["revenue_per_visitor"]),
            value(False, d["average_order_value"]), value(True, d["error_visit_rate"]),
            "-" if d["page_load_mean_ms"] is None else f"{d['page_load_mean_ms']:,.0f}",
            f"{d['visitors_1h']:,}", f"{d['visitors_24h']:,}")


VARIANT_HEADER = ("variant", "visitors", "visits", "bounce", "orders", "units", "conv.", "revenue",
                  "rev/visitor", "AOV", "error visits", "load ms", "1h visitors",
                  "24h visitors")
COMPARISON_HEADER = ("variant", "metric", "role", "control", "variant", "lift", "CI", "p",
                     "p adj.", "MDE", "significant")


def comparison_row(c: MetricComparison) -> tuple[str, ...]:
    r = c.result
    raw = r.sequential_p_value if c.sequential else r.p_value
    rate = c.definition.is_rate
    return (c.variant, c.metric, c.role, value(rate, r.control_value),
            value(rate, r.variant_value), percent(r.lift), interval(c), p_value(raw),
            p_value(c.p_value_adjusted), absolute(rate, c.mde),
            "yes" if c.significant else "")


CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "no correction"}


def rule(report: Report) -> str:
    """How the comparisons are judged, in a line."""
    s = report.settings
    if s.inference == "sequential":
        kind = f"{s.confidence:.0%} confidence sequences (valid at every look)"
    else:
        kind = f"{s.confidence:.0%} fixed-horizon intervals (valid for one look)"
    return (f"{kind}; p adj.: {CORRECTIONS[s.correction]} over each experiment and "
            "population; MDE: 80% power at this sample")


def coverage_lines(report: Report) -> list[str]:
    """A line per definition (and the dimension of a breakdown) that some served visits
    were computed without: its numbers leave those visits out until the batch layer
    computes them again."""
    left_out = [(name, c, "this definition") for name, c in report.coverage.items()]
    if report.dimension is not None and report.dimension_coverage is not None:
        left_out.append((report.dimension, report.dimension_coverage,
                         "this dimension was declared"))
    minute = "%Y-%m-%d %H:%M"
    return [f"{name}: {c.without:,} of {c.visits:,} visits (started {c.without_from:{minute}} "
            f"to {c.without_to:{minute}} UTC) were computed before {before}: left out; "
            "`abstream batch --all` (or --from/--to over them) computes them again"
            for name, c, before in left_out if c.without and c.without_from and c.without_to]


def render_text(report: Report) -> str:
    if not report.experiments:
        # Visits left out of every comparison: say why, not that there are none.
        return "\n".join(coverage_lines(report)
                         or ["no experiment data yet (run the pipeline first)"])
    as_of = report.as_of.strftime("%Y-%m-%d %H:%M UTC") if report.as_of else "-"
    by = "" if report.dimension is None else \
        f" by {report.dimension} (p adj. over each experiment's values, guardrails apart)"
    blocks = [f"experiment report as of {as_of}; comparisons per visitor over closed "
              f"visits; {rule(report)}{by}", *coverage_lines(report)]
    for e in report.experiments:
        lines = [f"{title(e, report.dimension)}: {status(e)}; {srm_line(e)}"]
        if e.segment is None:
            lines.append(render_table([VARIANT_HEADER, *map(variant_row, e.variants)]))
        else:
            lines.append("visitors: " + ", ".join(f"{v.variant} {v.visitors:,}"
                                                  for v in e.variants))
        if e.comparisons:
            lines.append(render_table([COMPARISON_HEADER,
                                       *map(comparison_row, e.comparisons)],
                                      left=(0, 1, 2)))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
