"""The speed layer's components, in pipeline order, for each kind of source."""

from __future__ import annotations

from abstream import topology
from abstream.config import Config
from abstream.errors import UsageError
from abstream.speed import archive, ingest, sessionize, validate
from abstream.speed.component import Component

COMPONENTS: dict[str, Component] = {
    c.name: c for c in (ingest.COMPONENT, validate.COMPONENT, archive.COMPONENT,
                        sessionize.COMPONENT)
}


def pipeline_components(config: Config) -> list[Component]:
    """The components of ``config.source``, in pipeline order."""
    return [COMPONENTS[node.name] for node in topology.PIPELINES[config.source]]


def select(names: list[str] | None, config: Config) -> list[Component]:
    """The named components in pipeline order (all of the source's when ``names`` is
    empty)."""
    available = pipeline_components(config)
    if not names:
        return available
    known = [c.name for c in available]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"unknown component {unknown[0]!r} for source {config.source}; "
                         f"choose from {', '.join(known)}")
    return [c for c in available if c.name in names]
