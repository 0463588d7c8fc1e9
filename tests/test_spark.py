"""The session factory's choices for a JVM abstream starts itself (local mode)."""

from pyspark.sql import SparkSession


def test_a_local_jvm_collects_with_the_throughput_collector(spark: SparkSession):
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {bean.getName() for bean in beans}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names


def test_a_local_jvm_keeps_the_log4j_settings(spark: SparkSession):
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert "-Dlog4j2.configurationFile=" in options
    assert "-XX:+UseParallelGC" in options
