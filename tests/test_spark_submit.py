"""The same entry point under spark-submit: the session comes from the command line."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import abstream
from abstream.config import load_config
from abstream.generator import GeneratorSettings, generate
from abstream.jars import cached_jars
from abstream.layout import Layout


@pytest.mark.slow
def test_run_once_under_spark_submit(spark: SparkSession, tmp_path):
    layout = Layout.of(tmp_path / "data")
    generate(GeneratorSettings(events=1_500, seed=5), Path(layout.landing))
    jars = cached_jars(load_config(environ={}).spark)
    assert jars, "the JARs were fetched when the session fixture started"
    bin_dir = Path(sys.executable).parent
    package = Path(abstream.__file__).parent
    entry = package / "__main__.py"
    log4j = package / "resources" / "log4j2.properties"
    result = subprocess.run(
        [str(bin_dir / "spark-submit"), "--master", "local[2]", "--jars", ",".join(jars),
         "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
         "--conf", "spark.sql.catalog.spark_catalog="
                   "org.apache.spark.sql.delta.catalog.DeltaCatalog",
         "--conf", "spark.ui.enabled=false",
         "--driver-java-options", f"-Dlog4j2.configurationFile={log4j}",
         str(entry), "run", "--once", "--data-dir", layout.root],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
             "ABSTREAM__MONITOR__EXPORTER__PORT": "0"})
    assert result.returncode == 0, result.stderr[-3000:]
    events = spark.read.format("delta").load(layout.events).count()
    gold = spark.read.format("delta").load(layout.experiment_metrics).count()
    assert events > 1_400 and gold > 0
