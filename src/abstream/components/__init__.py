"""The speed layer's components, in pipeline order."""

from __future__ import annotations

from abstream.components import ingest, metrics, sessionize
from abstream.components.base import Component, Context
from abstream.errors import UsageError

COMPONENTS: dict[str, Component] = {
    c.name: c for c in (ingest.COMPONENT, sessionize.COMPONENT, metrics.COMPONENT)
}

__all__ = ["COMPONENTS", "Component", "Context", "select"]


def select(names: list[str] | None) -> list[Component]:
    """The named components in pipeline order (all of them when ``names`` is empty)."""
    if not names:
        return list(COMPONENTS.values())
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        raise UsageError(f"unknown component {unknown[0]!r}; "
                         f"choose from {', '.join(COMPONENTS)}")
    return [c for name, c in COMPONENTS.items() if name in names]
