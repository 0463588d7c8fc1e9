"""The report as one self-contained HTML page: tables plus inline SVG plots of the lifts
with their intervals over time and of the visitors per variant. No script, no external
file: it reads the same offline, in a mail or attached to a ticket."""

from __future__ import annotations

import io
from html import escape

from abstream.metrics.definitions import Catalog
from abstream.report.build import CONTROL, ExperimentReport, Report
from abstream.report.text import (
    COMPARISON_HEADER,
    VARIANT_HEADER,
    comparison_row,
    coverage_lines,
    rule,
    srm_line,
    status,
    title,
    variant_row,
)

#: Series colours, control first; the screenshot test looks for them.
COLORS = ("#1f5fa8", "#d1495b", "#2a9d4b", "#e09f1f", "#7b4bb0", "#00798c")

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 1200px;
       color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 36px; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child, td.name { text-align: left; }
.badge { padding: 2px 8px; border-radius: 10px; font-size: 12px; color: #fff; }
.final { background: #555; } .provisional { background: #999; }
.srm-bad { color: #b00; font-weight: bold; }
.sig { font-weight: bold; }
svg { max-width: 100%; height: auto; }
"""


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]],
           emphasised: list[bool] | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        css = ' class="sig"' if emphasised and emphasised[i] else ""
        cells = "".join(f"<td>{escape(cell)}</td>" for cell in row)
        body.append(f"<tr{css}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _figure(e: ExperimentReport, catalog: Catalog) -> str:
    """Visitors per variant and each metric's lift (with its interval) over time."""
    from matplotlib import rc_context
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    colors = {v.variant: COLORS[i % len(COLORS)] for i, v in enumerate(e.variants)}
    with rc_context({"svg.fonttype": "none", "font.size": 9}):
        names = [d.name for d in catalog.definitions]
        rows = -(-(len(names) + 1) // 3)
        figure = Figure(figsize=(12, 3.2 * rows), layout="constrained")
        axes = figure.subplots(rows, 3, sharex=True, squeeze=False).flatten()
        for unused in axes[len(names) + 1:]:
            unused.set_visible(False)
        times = e.times
        locator = AutoDateLocator(maxticks=6)
        for ax in axes:
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
            ax.grid(alpha=0.3)
        axes[0].set_title("visitors per variant (cumulative)")
        for variant, counts in e.visitors_over_time.items():
            axes[0].plot(times, counts, color=colors[variant], label=variant, linewidth=2)
        axes[0].legend(loc="upper left", frameon=False)
        for ax, metric in zip(axes[1:], names, strict=False):
            ax.set_title(f"{metric}: lift vs {CONTROL}")
            ax.axhline(0, color="#444", linewidth=0.8)
            ax.yaxis.set_major_formatter(lambda y, _: f"{y:+.0%}")
            for (variant, name), results in e.comparisons_over_time.items():
                if name != metric:
                    continue
                shown = [(t, r) for t, r in zip(times, results, strict=True)
                         if r is not None and r.lift is not None]
                if not shown:
                    continue
                xs = [t for t, _ in shown]
                fixed = [r.fixed_lift for _, r in shown]
                ax.fill_between(xs, [i.low for i in fixed], [i.high for i in fixed],
                                color=colors[variant], alpha=0.18, linewidth=0)
                sequential = [r.sequential_lift for _, r in shown]
                for bound in ([i.low for i in sequential], [i.high for i in sequential]):
                    ax.plot(xs, bound, color=colors[variant], linewidth=1, linestyle="--")
                ax.plot(xs, [r.lift for _, r in shown], color=colors[variant], linewidth=2,
                        marker="o", markersize=3, label=variant)
        out = io.StringIO()
        figure.savefig(out, format="svg")
    svg = out.getvalue()
    return svg[svg.index("<svg"):]


def _section(e: ExperimentReport, report: Report) -> str:
    experiment, _, rest = title(e, report.dimension).partition(" / ")
    heading = f"{escape(experiment)} <small>/ {escape(rest)}</small>"
    badge = f'<span class="badge {status(e)}">{status(e)}</span>'
    srm_css = "srm-bad" if e.srm_flagged else ""
    parts = [f"<h2>{heading} {badge}</h2>",
             f'<p class="{srm_css}">{escape(srm_line(e))}</p>',
             _table(VARIANT_HEADER, [variant_row(v) for v in e.variants])
             if e.segment is None else
             _table(("variant", "visitors"), [(v.variant, f"{v.visitors:,}")
                                              for v in e.variants])]
    if e.comparisons:
        parts.append(_table(COMPARISON_HEADER, [comparison_row(c) for c in e.comparisons],
                            [c.significant for c in e.comparisons]))
    if e.times:
        parts.append(_figure(e, report.catalog))
    return "<section>" + "\n".join(parts) + "</section>"


def render_html(report: Report) -> str:
    as_of = report.as_of.strftime("%Y-%m-%d %H:%M UTC") if report.as_of else "-"
    intro = (f"As of {as_of}. Lifts are relative to {CONTROL}; comparisons take the visitor "
             "as the unit over closed visits (ratios by the delta method, revenue per visitor "
             f"by Welch's t-test). Shown: {rule(report)}. Bold rows are significant. Plots "
             "are cumulative: each point uses every visit started before it; the shaded band "
             "is the fixed-horizon interval, the dashed lines the confidence sequence.")
    notes = "".join(f"<p>{escape(line)}</p>" for line in coverage_lines(report))
    sections = [_section(e, report) for e in report.experiments] or \
        ["<p>No experiment data yet: run the pipeline first.</p>"]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>abstream experiment report</title><style>{_STYLE}</style></head><body>"
        f"<h1>Experiment report</h1><p>{escape(intro)}</p>{notes}{''.join(sections)}"
        "</body></html>\n"
    )
