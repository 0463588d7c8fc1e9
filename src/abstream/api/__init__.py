"""``abstream serve``: the published results over HTTP, read-only and without Spark."""
