"""Lag, exactly: the age of the oldest record each component has not processed, read from
its checkpoint and its sources (Delta logs, files, Kafka offsets) without Spark."""

from abstream.lag.measure import LagMonitor, LagRow, MonitoredSource

__all__ = ["LagMonitor", "LagRow", "MonitoredSource"]
