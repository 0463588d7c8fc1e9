"""A clickstream model: visitors, their sessions and visits, experiments and planted effects.

Everything is drawn from one ``random.Random`` so that a seed fixes the output. Times are
integer milliseconds since the epoch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
VISIT_GAP_MS = 35 * MINUTE_MS


@dataclass(frozen=True)
class Experiment:
    """An experiment: its variants (the one named ``control`` is the baseline) and weights."""

    id: str
    variants: tuple[str, ...]
    weights: tuple[float, ...]
    qualifying_pages: tuple[str, ...]

    def qualifies(self, page: str) -> bool:
        return any(page == p or (p != "/" and page.startswith(p)) for p in self.qualifying_pages)


EXPERIMENTS = (
    Experiment("checkout_button", ("control", "treatment"), (0.5, 0.5), ("/cart", "/checkout")),
    Experiment("search_ranking", ("control", "treatment_a", "treatment_b"),
               (1 / 3, 1 / 3, 1 / 3), ("/search",)),
    Experiment("homepage_banner", ("control", "treatment"), (0.5, 0.5), ("/",)),
)

#: Relative lifts a treatment can carry: ``--effect conversion=0.10`` raises the order
#: probability of visits exposed to a non-control variant by 10 %.
EFFECT_METRICS = ("conversion", "revenue", "bounce", "errors", "page_load")


@dataclass(frozen=True)
class Behaviour:
    """Base rates of the model (before effects)."""

    bounce: float = 0.35
    add_to_cart: float = 0.35
    order_given_cart: float = 0.30
    error_per_pageview: float = 0.02
    page_load_median_ms: float = 800.0
    revenue_mean: float = 60.0
    extra_pageviews_mean: float = 4.0
    think_time_mean_ms: float = 45_000.0
    second_visit_in_session: float = 0.15
    long_pause: float = 0.02
    exact_gap_pause: float = 0.003
    sessions_per_visitor_mean: float = 2.0


@dataclass(slots=True)
class Visitor:
    visitor_id: str
    variants: dict[str, str]
    qualified: dict[str, bool]
    sessions_left: int
    #: JSON of each experiment entry, (not qualified, qualified), in the model's order.
    entries_json: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class Event:
    """One beacon before serialisation; ``qualified`` follows the model's experiment order."""

    ts_ms: int
    type: str
    page: str
    qualified: tuple[bool, ...]
    revenue: float | None = None
    units: int | None = None
    page_load_ms: int | None = None
    event_id: str = ""


@dataclass(slots=True)
class Visit:
    session_id: str
    visitor: Visitor
    events: list[Event] = field(default_factory=list)


def new_id(rng: random.Random) -> str:
    value = f"{rng.getrandbits(128):032x}"
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"


class ClickstreamModel:
    """Draws visitors and their visits; effects act on visits exposed to a treatment."""

    def __init__(
        self,
        rng: random.Random,
        effects: Mapping[str, float],
        experiments: tuple[Experiment, ...] = EXPERIMENTS,
        behaviour: Behaviour | None = None,
    ) -> None:
        self.rng = rng
        self.effects = dict(effects)
        self.experiments = experiments
        self.behaviour = behaviour or Behaviour()
        self._qualifying_cache: dict[str, tuple[str, ...]] = {}

    def new_visitor(self) -> Visitor:
        rng = self.rng
        variants = {e.id: _weighted(rng, e.variants, e.weights) for e in self.experiments}
        sessions = 1 + _geometric(rng, self.behaviour.sessions_per_visitor_mean - 1)
        entries = tuple(
            tuple(f'{{"id":"{e.id}","variant":"{variants[e.id]}","qualified":{q}}}'
                  for q in ("false", "true"))
            for e in self.experiments
        )
        return Visitor(new_id(rng), variants, {e.id: False for e in self.experiments},
                       sessions, entries)  # type: ignore[arg-type]

    def session(self, visitor: Visitor, start_ms: int) -> Iterator[Visit]:
        """The visits of one new session_id: usually one, sometimes two split by > 35 min."""
        session_id = new_id(self.rng)
        visit = self._visit(session_id, visitor, start_ms)
        yield visit
        if self.rng.random() < self.behaviour.second_visit_in_session:
            gap = self.rng.randint(VISIT_GAP_MS + 1_000, 3 * HOUR_MS)
            yield self._visit(session_id, visitor, visit.events[-1].ts_ms + gap)

    def _treated(self, visitor: Visitor, exposed: set[str]) -> int:
        """How many experiments this visit is exposed to in a non-control variant."""
        return sum(1 for e in exposed if visitor.variants[e] != "control")

    def _lift(self, metric: str, treated: int) -> float:
        return (1.0 + self.effects.get(metric, 0.0)) ** treated

    def _visit(self, session_id: str, visitor: Visitor, start_ms: int) -> Visit:
        rng, b = self.rng, self.behaviour
        visit = Visit(session_id, visitor)
        pages = self._pages()
        exposed_before = {e.id for e in self.experiments if visitor.qualified[e.id]}
        landing_exposed = exposed_before | self._exposures(pages[:1])
        bounce = rng.random() < min(0.95, b.bounce * self._lift(
            "bounce", self._treated(visitor, landing_exposed)))
        if bounce:
            pages = pages[:1]
        cart = not bounce and rng.random() < b.add_to_cart
        if cart:
            pages += [f"/product/{rng.randint(1, 500)}", "/cart", "/checkout"]
        exposed = exposed_before | self._exposures(pages)
        treated = self._treated(visitor, exposed)
        order = cart and rng.random() < min(
            0.95, b.order_given_cart * self._lift("conversion", treated))

        ts = start_ms
        cart_after = len(pages) - 3 if cart else -1
        for index, page in enumerate(pages):
            if index:
                ts += self._think_time()
            self._qualify(visitor, page)
            treated_now = self._treated(visitor, exposed_now(visitor))
            load = rng.lognormvariate(math.log(b.page_load_median_ms), 0.5)
            load *= self._lift("page_load", treated_now)
            visit.events.append(self._event(visitor, ts, "pageview", page, page_load_ms=int(load)))
            if rng.random() < b.error_per_pageview * self._lift("errors", treated_now):
                ts += rng.randint(50, 3_000)
                visit.events.append(self._event(visitor, ts, "error", page))
            if index == cart_after:
                ts += rng.randint(1_000, 20_000)
                visit.events.append(self._event(visitor, ts, "add_to_cart", page))
        if order:
            ts += self._think_time()
            revenue = rng.lognormvariate(math.log(b.revenue_mean) - 0.32, 0.8)
            revenue *= self._lift("revenue", treated)
            units = 1 + _geometric(rng, 0.8)
            visit.events.append(self._event(visitor, ts, "order", "/checkout",
                                            revenue=round(revenue, 2), units=units))
        return visit

    def _pages(self) -> list[str]:
        rng = self.rng
        pages = [self._page(0.4, 0.7)]
        for _ in range(1 + _geometric(rng, self.behaviour.extra_pageviews_mean)):
            pages.append(self._page(0.15, 0.5))
        return pages

    def _page(self, home: float, search: float) -> str:
        """'/' with probability ``home``, '/search' up to ``search``, else a product page."""
        draw = self.rng.random()
        if draw < home:
            return "/"
        if draw < search:
            return "/search"
        return f"/product/{1 + int(draw * 1e6) % 500}"

    def _qualifying(self, page: str) -> tuple[str, ...]:
        found = self._qualifying_cache.get(page)
        if found is None:
            found = tuple(e.id for e in self.experiments if e.qualifies(page))
            self._qualifying_cache[page] = found
        return found

    def _exposures(self, pages: list[str]) -> set[str]:
        return {e for p in pages for e in self._qualifying(p)}

    def _qualify(self, visitor: Visitor, page: str) -> None:
        for e in self._qualifying(page):
            visitor.qualified[e] = True

    def _think_time(self) -> int:
        rng, b = self.rng, self.behaviour
        draw = rng.random()
        if draw < b.exact_gap_pause:
            return VISIT_GAP_MS
        if draw < b.exact_gap_pause + b.long_pause:
            return rng.randint(20 * MINUTE_MS, VISIT_GAP_MS - 1)
        return min(int(rng.expovariate(1 / b.think_time_mean_ms)) + 500, 15 * MINUTE_MS)

    def _event(self, visitor: Visitor, ts_ms: int, kind: str, page: str,
               **fields: float | int | None) -> Event:
        qualified = tuple(visitor.qualified[e.id] for e in self.experiments)
        return Event(ts_ms, kind, page, qualified, event_id=new_id(self.rng),
                     **fields)  # type: ignore[arg-type]


def exposed_now(visitor: Visitor) -> set[str]:
    return {e for e, q in visitor.qualified.items() if q}


def _weighted(rng: random.Random, choices: tuple[str, ...], weights: tuple[float, ...]) -> str:
    draw = rng.random() * sum(weights)
    for choice, weight in zip(choices, weights, strict=True):
        draw -= weight
        if draw < 0:
            return choice
    return choices[-1]


def _geometric(rng: random.Random, mean: float) -> int:
    """A geometric count (0, 1, 2, ...) with the given mean."""
    if mean <= 0:
        return 0
    p = 1.0 / (1.0 + mean)
    return int(math.log(1.0 - rng.random()) / math.log(1.0 - p))
