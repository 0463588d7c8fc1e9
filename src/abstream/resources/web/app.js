// abstream's results page: the experiments, and each one's lifts, intervals and lift over
// time, from abstream serve's API on the same origin. Its state is in the URL; it refreshes
// when the published results change (their ETag).
"use strict";

const API = "/api/v1";
const ROLES = [["primary", "Primary metrics"], ["secondary", "Secondary metrics"],
               ["guardrail", "Guardrails"]];
const REFRESH_MS = 15000;
let version = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "text") node.textContent = value;
    else if (key === "on") Object.entries(value).forEach(([e, f]) => node.addEventListener(e, f));
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined));
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, v));
  return node;
}

const dash = "–";
function pct(x) { return x == null ? dash : `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)}%`; }
function num(x) {
  if (x == null) return dash;
  const a = Math.abs(x);
  return a >= 1000 ? x.toFixed(0) : a >= 1 ? x.toFixed(2) : x.toPrecision(3);
}
function utc(iso) { return iso ? iso.replace("T", " ").replace(/:\d\d(\.\d+)?Z$/, " UTC") : dash; }

async function getJson(path) {
  const response = await fetch(path);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return [body, response.headers.get("ETag")];
}

function state() {
  const p = new URLSearchParams(location.search);
  return {experiment: p.get("experiment"), population: p.get("population"),
          dimension: p.get("dimension"), metric: p.get("metric"),
          inference: p.get("inference") === "fixed" ? "fixed" : "sequential"};
}

function go(changes) {
  const p = new URLSearchParams(location.search);
  Object.entries(changes).forEach(([k, v]) => (v ? p.set(k, v) : p.delete(k)));
  history.pushState(null, "", `${location.pathname}?${p}`);
  render();
}

function listView(list) {
  if (!list.length) return [el("p", {class: "note", text: "Nothing is published yet."})];
  const rows = list.map((e) => el("tr", {"data-experiment": e.experiment_id},
    el("td", {class: "name"}, el("a", {
      href: `?experiment=${encodeURIComponent(e.experiment_id)}&population=${e.population}`,
      text: e.experiment_id})),
    el("td", {class: "name", text: e.population}),
    el("td", {class: "name", text: e.variants.join(", ")}),
    el("td", {class: "name"}, badge(e.final)),
    el("td", {text: utc(e.data_through)})));
  return [el("h1", {text: "Experiments"}), el("table", {id: "experiments"},
    el("tr", {}, ...["experiment", "population", "variants", "status"].map(
      (h) => el("th", {class: "name", text: h})), el("th", {text: "data through"})),
    ...rows)];
}

function badge(final) {
  return el("span", {class: `badge ${final ? "final" : "provisional"}`,
                     text: final ? "final" : "provisional"});
}

function bounds(c, inference) {
  return inference === "fixed" ? [c.ci_low, c.ci_high] : [c.sequential_ci_low, c.sequential_ci_high];
}

function intervalBar(c, inference, scale) {
  const [low, high] = bounds(c, inference);
  const other = bounds(c, inference === "fixed" ? "sequential" : "fixed");
  const width = 180, x = (v) => width / 2 + (v / scale) * (width / 2 - 6);
  const box = svg("svg", {width, height: 16, class: "interval"});
  const title = svg("title", {});
  title.textContent = `${inference}: [${pct(low)}, ${pct(high)}]; ` +
    `${inference === "fixed" ? "sequential" : "fixed"}: [${pct(other[0])}, ${pct(other[1])}]`;
  box.append(title, svg("line", {x1: x(0), x2: x(0), y1: 0, y2: 16, stroke: "#8c959f"}));
  if (low != null && high != null) {
    box.append(svg("rect", {x: x(Math.max(low, -scale)), y: 5, height: 6,
      width: Math.max(1, x(Math.min(high, scale)) - x(Math.max(low, -scale))),
      fill: c.significant ? "#0969da" : "#8c959f"}));
  }
  if (c.lift != null) box.append(svg("circle", {cx: x(c.lift), cy: 8, r: 3, fill: "#1f2328"}));
  return box;
}

function comparisonTables(results, inference) {
  const ends = results.comparisons.flatMap((c) => bounds(c, inference)).filter((v) => v != null);
  const scale = Math.max(0.05, ...ends.map(Math.abs));
  const sections = [];
  for (const [role, title] of ROLES) {
    const shown = results.comparisons.filter((c) => c.role === role);
    if (!shown.length) continue;
    const head = el("tr", {}, ...["metric", "variant"].map((h) => el("th", {class: "name", text: h})),
      ...["control", "variant", "lift", `${inference} interval`, "p adj.", "MDE", "significant"]
        .map((h) => el("th", {text: h})));
    const rows = shown.map((c) => el("tr", {class: `comparison${c.significant ? " significant" : ""}`,
        "data-metric": c.metric, "data-variant": c.variant, "data-lift": c.lift},
      el("td", {class: "name", text: c.metric}), el("td", {class: "name", text: c.variant}),
      el("td", {text: num(c.control_value)}), el("td", {text: num(c.variant_value)}),
      el("td", {class: "lift", text: pct(c.lift)}),
      el("td", {}, intervalBar(c, inference, scale)),
      el("td", {text: c.p_value_adjusted == null ? dash : c.p_value_adjusted.toFixed(3)}),
      el("td", {text: num(c.mde)}), el("td", {text: c.significant ? "yes" : ""})));
    sections.push(el("h2", {text: title}), el("table", {class: `role-${role}`}, head, ...rows));
  }
  if (!sections.length) sections.push(el("p", {class: "note", text: "Too few units to compare yet."}));
  return sections;
}

function variantsTable(results) {
  return el("table", {class: "variants"},
    el("tr", {}, el("th", {class: "name", text: "variant"}), el("th", {text: "visitors"})),
    ...results.variants.map((v) => el("tr", {}, el("td", {class: "name", text: v.variant}),
      el("td", {text: v.visitors.toLocaleString("en")}))));
}

function chart(series) {
  const width = 660, height = 220, pad = 52;
  const variant = Object.keys(series.points[0]?.variants || {})[0];
  const points = series.points.map((p, i) => [i, p.variants[variant]]).filter(([, v]) => v);
  const box = svg("svg", {width, height, id: "lift-chart"});
  if (!points.length) return el("p", {class: "note", text: "No lift over time yet."});
  const values = points.flatMap(([, v]) => [v.lift, v.sequential_ci_low, v.sequential_ci_high])
    .filter((v) => v != null);
  const top = Math.max(0.05, ...values), bottom = Math.min(-0.05, ...values);
  const last = Math.max(1, series.points.length - 1);
  const x = (i) => pad + (i / last) * (width - 2 * pad);
  const y = (v) => pad / 2 + ((top - v) / (top - bottom)) * (height - pad);
  const band = points.filter(([, v]) => v.sequential_ci_low != null && v.sequential_ci_high != null);
  if (band.length) {
    const outline = [...band.map(([i, v]) => `${x(i)},${y(v.sequential_ci_high)}`),
                     ...band.reverse().map(([i, v]) => `${x(i)},${y(v.sequential_ci_low)}`)];
    box.append(svg("polygon", {points: outline.join(" "), fill: "#ddf4ff"}));
  }
  box.append(svg("line", {x1: pad, x2: width - pad, y1: y(0), y2: y(0), stroke: "#8c959f"}));
  box.append(svg("polyline", {fill: "none", stroke: "#0969da", "stroke-width": 2,
    points: points.map(([i, v]) => `${x(i)},${y(v.lift)}`).join(" ")}));
  for (const [label, vx, anchor] of [[utc(series.points[0].time), pad, "start"],
      [utc(series.points[series.points.length - 1].time), width - pad, "end"]]) {
    const text = svg("text", {x: vx, y: height - 4, "text-anchor": anchor});
    text.textContent = label;
    box.append(text);
  }
  for (const v of [top, 0, bottom]) {
    const text = svg("text", {x: pad - 4, y: y(v) + 4, "text-anchor": "end"});
    text.textContent = pct(v);
    box.append(text);
  }
  return el("figure", {}, box, el("figcaption", {class: "note",
    text: `${series.metric}: cumulative lift of ${variant}, its confidence sequence shaded`}));
}

function select(name, value, options, onChange) {
  return el("label", {}, `${name} `, el("select", {name, on: {change: (e) => onChange(e.target.value)}},
    ...options.map(([v, label]) => el("option", v === value ? {value: v, selected: ""} : {value: v},
                                      label))));
}

async function experimentView(list, s) {
  const entries = list.filter((e) => e.experiment_id === s.experiment);
  if (!entries.length) return [el("p", {class: "note", text: `${s.experiment} is not published.`})];
  const entry = entries.find((e) => e.population === s.population) || entries[0];
  const path = `${API}/experiments/${encodeURIComponent(entry.experiment_id)}`;
  const query = `population=${entry.population}`;
  const [results] = await getJson(`${path}/results?${query}`);
  const metrics = [...new Set(results.comparisons.map((c) => c.metric))];
  const metric = metrics.includes(s.metric) ? s.metric : metrics[0];
  const controls = el("div", {class: "controls"},
    select("population", entry.population, entries.map((e) => [e.population, e.population]),
           (v) => go({population: v})),
    select("inference", s.inference, [["sequential", "confidence sequence"],
                                      ["fixed", "fixed horizon"]], (v) => go({inference: v})),
    entry.dimensions.length ? select("dimension", s.dimension || "",
      [["", "overall"], ...entry.dimensions.map((d) => [d, d])], (v) => go({dimension: v})) : null,
    metrics.length ? select("metric", metric, metrics.map((m) => [m, m]), (v) => go({metric: v}))
      : null);
  const out = [el("h1", {}, `${entry.experiment_id} / ${entry.population} `, badge(entry.final)),
               controls];
  if (results.srm_flagged) {
    out.push(el("div", {class: "banner", id: "srm",
      text: `Sample ratio mismatch: p = ${results.srm_p_value.toExponential(2)}. ` +
            "The split of visitors does not match the allocation; check the assignment " +
            "before reading the lifts."}));
  }
  if (s.dimension && entry.dimensions.includes(s.dimension)) {
    const [breakdown] = await getJson(`${path}/results?${query}&dimension=${s.dimension}`);
    for (const value of breakdown.values) {
      out.push(el("h2", {text: `${s.dimension} = ${value.value}`}), variantsTable(value),
               ...comparisonTables(value, s.inference));
    }
    return out;
  }
  out.push(variantsTable(results), ...comparisonTables(results, s.inference));
  if (metric) {
    const [series] = await getJson(`${path}/timeseries?${query}&metric=${metric}`);
    out.push(el("h2", {text: "Lift over time"}), chart(series));
  }
  return out;
}

async function render() {
  const main = document.getElementById("main");
  try {
    const [list, etag] = await getJson(`${API}/experiments`);
    version = etag;
    const s = state();
    const shown = list.find((e) => e.experiment_id === s.experiment) || list[0];
    document.getElementById("times").textContent = shown
      ? `data through ${utc(shown.data_through)} · computed at ${utc(shown.computed_at)}` : "";
    main.replaceChildren(...(s.experiment ? await experimentView(list, s) : listView(list)));
  } catch (error) {
    main.replaceChildren(el("p", {class: "banner", text: `Could not load the results: ${error.message}`}));
  }
}

async function refreshWhenChanged() {
  try {
    const response = await fetch(`${API}/experiments`, version ? {headers: {"If-None-Match": version}} : {});
    if (response.status === 200 && response.headers.get("ETag") !== version) await render();
  } catch (error) {
    // The server is away; try again at the next tick.
  }
}

window.addEventListener("popstate", render);
render();
setInterval(refreshWhenChanged, REFRESH_MS);
