"""One deployment, opened: its Spark session, its configuration and its data dir."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from abstream.config import Config
from abstream.io.spark import spark_session
from abstream.layout import Layout


@dataclass(frozen=True)
class Deployment:
    spark: SparkSession
    config: Config
    layout: Layout

    @classmethod
    def open(cls, config: Config) -> Deployment:
        """The deployment of ``config``, with the one Spark session every command uses."""
        return cls(spark_session(config.spark), config, Layout.of_config(config))
