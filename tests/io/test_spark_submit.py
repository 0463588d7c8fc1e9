"""The same entry point under spark-submit on a Spark standalone cluster (a master and two
workers on 127.0.0.1): the session, its JARs and the Python code come from the command line,
the tasks run in the workers' executors."""

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

import abstream
from abstream.config import load_config
from abstream.generator.write import GeneratorSettings, generate
from abstream.io.jars import cached_jars
from abstream.layout import Layout
from tests.reference import valid_event
from tests.servers import spark_cluster


@pytest.mark.slow
def test_run_once_on_a_standalone_cluster(spark: SparkSession, tmp_path):
    layout = Layout.of(tmp_path / "data")
    generate(GeneratorSettings(events=1_500, seed=5), Path(layout.landing))
    jars = cached_jars(load_config(environ={}).spark)
    assert jars, "the JARs were fetched when the session fixture started"
    bin_dir = Path(sys.executable).parent
    package = Path(abstream.__file__).parent
    code = shutil.make_archive(str(tmp_path / "abstream"), "zip", package.parent, package.name)
    log4j = package / "resources" / "log4j2.properties"
    with spark_cluster(tmp_path / "cluster", Path(pyspark.__file__).parent) as (master, ui):
        result = subprocess.run(
            [str(bin_dir / "spark-submit"), "--master", master, "--total-executor-cores", "2",
             "--jars", ",".join(jars), "--py-files", code,
             "--conf", f"spark.pyspark.python={sys.executable}",
             "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
             "--conf", "spark.sql.catalog.spark_catalog="
                       "org.apache.spark.sql.delta.catalog.DeltaCatalog",
             "--conf", "spark.ui.enabled=false",
             "--driver-java-options", f"-Dlog4j2.configurationFile={log4j}",
             str(package / "__main__.py"), "run", "--once", "--data-dir", layout.root],
            capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                 "ABSTREAM__MONITOR__EXPORTER__PORT": "0"})
        assert result.returncode == 0, result.stderr[-3000:]
        with urllib.request.urlopen(f"{ui}/json/", timeout=5) as response:
            apps = json.load(response)["completedapps"]
    assert [app["cores"] for app in apps] == [2], "one application, one core per worker"
    executors = sorted((tmp_path / "cluster").glob("w*/app-*/*/stderr"))
    assert {path.parts[-4] for path in executors} == {"w0", "w1"}, "both workers ran one"
    lines = [line for path in sorted(Path(layout.landing).glob("beacons-*"))
             for line in path.read_text().splitlines()]
    expected = {event["event_id"] for line in lines if (event := valid_event(line))}
    bronze = spark.read.format("delta").load(layout.events)
    assert {row["event_id"] for row in bronze.select("event_id").collect()} == expected
    assert bronze.count() == len(expected)
    assert spark.read.format("delta").load(layout.experiment_metrics).count() > 0
