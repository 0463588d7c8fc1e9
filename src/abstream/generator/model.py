"""A clickstream model: visitors, their sessions and visits, experiments and planted effects.

Everything is drawn from one ``random.Random`` so that a seed fixes the output. Times are
integer milliseconds since the epoch.
"""

from __future__ import annotations

import math
import random
import zlib
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
#: probability of visits exposed to a non-control variant by 10 %;
#: ``--effect conversion=0.10@device=mobile`` does so for the visitors on mobile only.
EFFECT_METRICS = ("conversion", "revenue", "bounce", "errors", "page_load")

#: What a visitor is in (its ``device`` and ``country`` on every beacon), with the share
#: of visitors in each value. A visitor's values come from a hash of its id, not from the
#: model's random draws: the rest of the output is the same with or without them.
SEGMENTS: dict[str, tuple[tuple[str, float], ...]] = {
    "device": (("desktop", 0.5), ("mobile", 0.4), ("tablet", 0.1)),
    "country": (("US", 0.35), ("DE", 0.2), ("GB", 0.15), ("FR", 0.12), ("IN", 0.1),
                ("BR", 0.08)),
}


def segment_of(visitor_id: str, name: str) -> str:
    """The visitor's value of the segment ``name``."""
    draw = zlib.crc32(f"{name}:{visitor_id}".encode()) / 2 ** 32
    values = SEGMENTS[name]
    for value, share in values:
        draw -= share
        if draw < 0:
            return value
    return values[-1][0]


def effect_key(text: str) -> tuple[str, tuple[str, str] | None]:
    """``conversion`` or ``conversion@device=mobile``: the metric, and the segment the
    effect is limited to."""
    metric, _, segment = text.partition("@")
    if not segment:
        return metric, None
    name, _, value = segment.partition("=")
    return metric, (name, value)


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
    #: Its value of each of ``SEGMENTS``.
    segments: dict[str, str] = field(default_factory=dict)


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
        self.effects = [(*effect_key(key), lift) for key, lift in effects.items()]
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
        visitor_id = new_id(rng)
        return Visitor(visitor_id, variants, {e.id: False for e in self.experiments},
                       sessions, entries,  # type: ignore[arg-type]
                       {name: segment_of(visitor_id, name) for name in SEGMENTS})

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

    def _lift(self, metric: str, treated: int, visitor: Visitor) -> float:
        lift = 1.0
        for name, segment, amount in self.effects:
            if name == metric and (segment is None
                                   or visitor.segments.get(segment[0]) == segment[1]):
                lift *= (1.0 + amount) ** treated
        return lift

    def _visit(self, session_id: str, visitor: Visitor, start_ms: int) -> Visit:
        rng, b = self.rng, self.behaviour
        visit = Visit(session_id, visitor)
        pages = self._pages()
        exposed_before = {e.id for e in self.experiments if visitor.qualified[e.id]}
        landing_exposed = exposed_before | self._exposures(pages[:1])
        bounce = rng.random() < min(0.95, b.bounce * self._lift(
            "bounce", self._treated(visitor, landing_exposed), visitor))
        if bounce:
            pages = pages[:1]
        cart = not bounce and rng.random() < b.add_to_cart
        if cart:
            pages += [f"/product/{rng.randint(1, 500)}", "/cart", "/checkout"]
        exposed = exposed_before | self._exposures(pages)
        treated = self._treated(visitor, exposed)
        order = cart and rng.random() < min(
            0.95, b.order_given_cart * self._lift("conversion", treated, visitor))

        ts = start_ms
        cart_after = len(pages) - 3 if cart else -1
        for index, page in enumerate(pages):
            if index:
                ts += self._think_time()
            self._qualify(visitor, page)
            treated_now = self._treated(visitor, exposed_now(visitor))
            load = rng.lognormvariate(math.log(b.page_load_median_ms), 0.5)
            load *= self._lift("page_load", treated_now, visitor)
            visit.events.append(self._event(visitor, ts, "pageview", page, page_load_ms=int(load)))
            if rng.random() < b.error_per_pageview * self._lift("errors", treated_now,
                                                                 visitor):
                ts += rng.randint(50, 3_000)
                visit.events.append(self._event(visitor, ts, "error", page))
            if index == cart_after:
                ts += rng.randint(1_000, 20_000)
                visit.events.append(self._event(visitor, ts, "add_to_cart", page))
        if order:
            ts += self._think_time()
            revenue = rng.lognormvariate(math.log(b.revenue_mean) - 0.32, 0.8)
            revenue *= self._lift("revenue", treated, visitor)
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
