"""What the monitor watches: abstream's own components and whatever else the config lists."""

from __future__ import annotations

from abstream import topology
from abstream.config import Config
from abstream.lag.measure import MonitoredSource
from abstream.layout import KAFKA_SCHEME, Layout


def monitored_sources(config: Config) -> list[MonitoredSource]:
    """One entry per (component, source): abstream's own unless turned off, then the
    configured ones (any Spark job's query)."""
    layout = Layout.of_config(config)
    default_slo = config.monitor.slo.total_seconds()
    sources = []
    if config.monitor.include_own:
        sources = [MonitoredSource(node.name, layout.checkpoint(node.name),
                                   layout.place(name, config.kafka), default_slo)
                   for node in topology.PIPELINES[config.source] for name in node.reads]
    for item in config.monitor.components:
        slo = item.slo.total_seconds() if item.slo is not None else default_slo
        sources.append(MonitoredSource(item.name, item.checkpoint, item.source, slo))
    return sources


def watched_tables(config: Config) -> dict[str, str]:
    """name -> location of every Delta table whose version is exported: abstream's tables,
    the Delta sources of monitored components, and ``monitor.tables``."""
    layout = Layout.of_config(config)
    tables: dict[str, str] = {}
    if config.monitor.include_own:
        tables = {name: layout.table(name) for name in topology.PIPELINE_TABLES}
    for location in [*(s.source for s in monitored_sources(config)), *config.monitor.tables]:
        if location not in tables.values() and location != layout.landing \
                and not location.startswith(KAFKA_SCHEME):
            tables[table_name(location)] = location
    return tables


def table_name(location: str) -> str:
    """A short label for a table: its folder name."""
    return location.rstrip("/").rsplit("/", 1)[-1]
