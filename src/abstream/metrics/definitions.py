"""The metric language: what a definition says, checked when it is read.

A definition names what is counted per unit (a visitor, or a visit) and how units are
compared:

- ``proportion``: the share of units with at least one matching event (or visit);
- ``mean``: per unit, the count of matching events, or the sum of a property over them;
- ``ratio``: the sum of a ``numerator`` over the sum of a ``denominator``, each like a
  mean's (delta method).

What a definition counts is made of *parts*: per visit, the count of the events that
match a filter, the sum of a property over them, or a visit-level fact (every visit, the
bounces, the error visits). Parts are additive, so the visits' parts add up to a unit's
total, and a part's key says exactly what it counts: visits computed before a part
existed do not have its key.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from abstream.durations import parse_duration, spark_interval

Kind = Literal["proportion", "mean", "ratio", "quantile"]
Unit = Literal["visitor", "visit"]
Role = Literal["primary", "secondary", "guardrail"]
#: The visit-level facts a measure may count instead of events.
VisitFact = Literal["all", "bounce", "error"]
#: The part key of each visit-level fact.
VISIT_PARTS: dict[str, str] = {"all": "visits", "bounce": "bounce_visits",
                               "error": "error_visits"}

_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
Scalar = str | int | float | bool


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _listed(value: object) -> object:
    return [value] if isinstance(value, str) else value


class Condition(_Model):
    """A condition on one property: every comparison given must hold (``lt`` is <, ``le``
    <=, ``gt`` >, ``ge`` >=); ``exists``: whether the event has the property at all."""

    equals: Scalar | None = None
    in_: list[Scalar] | None = Field(default=None, alias="in", min_length=1)
    lt: float | None = None
    le: float | None = None
    gt: float | None = None
    ge: float | None = None
    exists: bool | None = None

    @model_validator(mode="after")
    def _says_something(self) -> Condition:
        if not self.model_dump(exclude_none=True):
            raise ValueError("a condition needs one of equals, in, lt, le, gt, ge, exists")
        return self

    def compared(self) -> bool:
        """Whether the condition compares numbers."""
        return any(v is not None for v in (self.lt, self.le, self.gt, self.ge))


def _filter(value: object) -> object:
    """``events: order`` or ``events: [order, refund]`` for ``events: {type: ...}``."""
    return {"type": value} if isinstance(value, str | list) else value


class EventFilter(_Model):
    """Which events count: of these ``type`` s (any when not given) and meeting every
    condition in ``where`` (property name -> condition)."""

    type: Annotated[list[str] | None, BeforeValidator(_listed)] = Field(
        default=None, min_length=1)
    where: dict[str, Condition] = Field(default_factory=dict)

    def canonical(self) -> dict[str, Any]:
        return {"type": sorted(self.type) if self.type else None,
                "where": {name: c.model_dump(mode="json", by_alias=True, exclude_none=True)
                          for name, c in sorted(self.where.items())}}


Events = Annotated[EventFilter, BeforeValidator(_filter)]


class Measure(_Model):
    """What is summed per unit: the matching ``events`` (their count, or the sum of the
    property ``value`` over them), or the ``visits`` with a fact."""

    events: Events | None = None
    value: str | None = None
    visits: VisitFact | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Measure:
        if (self.events is None) == (self.visits is None):
            raise ValueError("give events (a filter) or visits (all, bounce or error)")
        if self.value is not None and self.events is None:
            raise ValueError("value sums a property of events: give events too")
        return self

    def listed(self) -> str:
        """The key of the per-visit list of this measure's events (time and value: 1, or
        the property's value), where a window or a quantile needs each event."""
        return f"list:{self.part()}"

    def part(self) -> str:
        """The key of the per-visit part this measure sums."""
        if self.visits is not None:
            return VISIT_PARTS[self.visits]
        assert self.events is not None
        what = f"sum_{self.value}" if self.value else "count"
        types = ",".join(sorted(self.events.type)) if self.events.type else "*"
        key = f"{what}[{types}]"
        if self.events.where:
            key += "#" + _digest(self.events.canonical()["where"])[:8]
        return key

    def properties(self) -> set[str]:
        """The properties of events this measure reads."""
        if self.events is None:
            return set()
        return set(self.events.where) | ({self.value} if self.value else set())


class Cap(_Model):
    """A cap on each unit's total before any statistic: an ``absolute`` value, or the
    ``percentile`` (0 < p < 1) of the units' totals in the experiment and population."""

    absolute: float | None = Field(default=None, gt=0)
    percentile: float | None = Field(default=None, gt=0, lt=1)

    @model_validator(mode="after")
    def _one_kind(self) -> Cap:
        if (self.absolute is None) == (self.percentile is None):
            raise ValueError("give absolute or percentile")
        return self


def _duration(value: object) -> object:
    return parse_duration(value) if isinstance(value, str) else value


#: A duration: "7 days", "90 minutes"; written back the same way.
Duration = Annotated[timedelta, BeforeValidator(_duration),
                     PlainSerializer(spark_interval, when_used="json")]


class MetricWindow(_Model):
    """Count only a unit's events from ``delay`` to ``delay + length`` after its first
    exposure to the experiment (the assigned population: its first visit in it)."""

    delay: Duration = timedelta(0)
    length: Duration

    @model_validator(mode="after")
    def _positive(self) -> MetricWindow:
        if self.delay < timedelta(0) or self.length <= timedelta(0):
            raise ValueError("delay must not be negative, length must be positive")
        return self


class Definition(_Model):
    """One metric of the catalog."""

    name: str
    kind: Kind
    description: str = ""
    #: mean and proportion: what is counted.
    events: Events | None = None
    value: str | None = None
    visits: VisitFact | None = None
    #: ratio: the sums divided.
    numerator: Measure | None = None
    denominator: Measure | None = None
    #: quantile: which (0 < q < 1) of ``value`` over the matching events.
    quantile: float | None = Field(default=None, gt=0, lt=1)
    window: MetricWindow | None = None
    unit: Unit = "visitor"
    #: On each unit's total (a ratio's: its numerator's).
    cap: Cap | None = None
    role: Role = "secondary"
    better: Literal["higher", "lower"] = "higher"
    #: Units a side needs before the comparison is made; None: ``report.min_units``.
    min_units: int | None = Field(default=None, ge=2)

    @model_validator(mode="after")
    def _fits_kind(self) -> Definition:
        if not _NAME.match(self.name):
            raise ValueError(f"name {self.name!r}: use lower-case letters, digits and _")
        own = {"events": self.events, "value": self.value, "visits": self.visits}
        if self.kind == "ratio":
            given = [key for key, v in own.items() if v is not None]
            if given:
                raise ValueError(f"a ratio has numerator and denominator, not {given[0]}")
            if self.numerator is None or self.denominator is None:
                raise ValueError("a ratio needs numerator and denominator")
        else:
            for key in ("numerator", "denominator"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is for a ratio, not a {self.kind}")
            Measure(**own)
            if self.kind == "proportion" and self.value is not None:
                raise ValueError("a proportion counts units with a matching event: no value")
        if (self.kind == "quantile") != (self.quantile is not None):
            raise ValueError("a quantile needs quantile (0 < q < 1), and only a quantile has it")
        if self.kind == "quantile" and (self.value is None or self.events is None):
            raise ValueError("a quantile is of the value of events: give events and value")
        if self.cap is not None and self.kind in ("proportion", "quantile"):
            raise ValueError(f"a {self.kind} takes no cap")
        return self

    @property
    def measure(self) -> Measure:
        """A mean's or a proportion's measure."""
        return Measure(events=self.events, value=self.value, visits=self.visits)

    def measures(self) -> tuple[Measure, ...]:
        """The measures summed per unit: a ratio's numerator and denominator, or one."""
        if self.numerator is not None and self.denominator is not None:
            return (self.numerator, self.denominator)
        return (self.measure,)

    def listed(self, measure: Measure) -> bool:
        """Whether the measure's events are needed one by one (a window, a quantile)."""
        return measure.events is not None and (self.window is not None
                                               or self.kind == "quantile")

    def parts(self) -> tuple[str, ...]:
        """The keys of what the definition reads of each visit: summed parts
        (``metric_parts``), and event lists (``list:`` keys, ``metric_values``)."""
        return tuple(m.listed() if self.listed(m) else m.part() for m in self.measures())

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"

    @property
    def is_rate(self) -> bool:
        """Whether the metric is a share (shown as a percentage): a proportion, or a count
        per visit."""
        if self.kind == "proportion":
            return True
        return self.kind == "ratio" and self.numerator is not None \
            and self.numerator.value is None and self.denominator is not None \
            and self.denominator.visits == "all"

    @property
    def fingerprint(self) -> str:
        """What decides the definition's numbers (not its name, words, role or which way
        is better), hashed: equal for equal numbers, different after a change."""
        numbers = self.model_dump(mode="json", by_alias=True, exclude_none=True,
                                  exclude={"name", "description", "role", "better"})
        numbers["parts"] = list(self.parts())
        return _digest(numbers)[:12]


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class Dimension(_Model):
    """What results can be broken down by: a unit's value of ``property`` on the first
    event that has it, in its first visit in the experiment (the qualified population: its
    first exposed visit); values beyond the ``max_values`` most frequent are ``other``."""

    name: str
    property: str
    max_values: int = Field(default=20, ge=1)

    @model_validator(mode="after")
    def _named(self) -> Dimension:
        if not _NAME.match(self.name):
            raise ValueError(f"name {self.name!r}: use lower-case letters, digits and _")
        return self


def _distinct(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"two {what} are named {name!r}")
        seen.add(name)


class Catalog(_Model):
    """Definitions with distinct names (the metrics a report compares, in its order), and
    the dimensions results can be broken down by."""

    definitions: list[Definition] = Field(min_length=1)
    dimensions: list[Dimension] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct_names(self) -> Catalog:
        _distinct([d.name for d in self.definitions], "definitions")
        _distinct([d.name for d in self.dimensions], "dimensions")
        return self

    def dimension(self, name: str) -> Dimension | None:
        return next((d for d in self.dimensions if d.name == name), None)

    def event_parts(self) -> dict[str, Measure]:
        """The parts summed from events, by key."""
        return {m.part(): m for d in self.definitions for m in d.measures()
                if m.events is not None and not d.listed(m)}

    def listed_parts(self) -> dict[str, Measure]:
        """The event lists, by key."""
        return {m.listed(): m for d in self.definitions for m in d.measures() if d.listed(m)}

    def parts(self) -> tuple[str, ...]:
        """Every summed part's key, visit-level ones first, then the event lists'."""
        visit = sorted({m.part() for d in self.definitions for m in d.measures()
                        if m.visits is not None})
        return (*visit, *sorted(self.event_parts()), *sorted(self.listed_parts()))

    def get(self, name: str) -> Definition | None:
        return next((d for d in self.definitions if d.name == name), None)
