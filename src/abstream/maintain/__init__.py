"""Table maintenance: compaction, retention and vacuum of the Delta tables."""

from abstream.maintain.run import maintain

__all__ = ["maintain"]
