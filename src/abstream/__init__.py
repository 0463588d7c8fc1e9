"""abstream: A/B-test experiment metrics from clickstream events on Spark and Delta Lake."""

__version__ = "0.1.0"
