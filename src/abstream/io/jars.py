"""The JVM packages (Delta Lake and the Kafka connector): fetched from Maven Central once.

The first SparkSession resolves ``spark.packages`` through Spark's own Ivy into
``spark.jars_cache`` and records the resolved JAR files in a manifest. Later sessions load
those files directly with ``spark.jars``: no resolution, no network, a quieter start.
Run ``abstream jars`` to fetch them ahead of time and list the files (for ``--jars``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from abstream.config import SparkSettings

log = logging.getLogger(__name__)

#: Transitive dependencies of the packages that Spark already ships in a newer version;
#: a second, older copy on the classpath only invites conflicts.
PROVIDED_BY_SPARK = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.parquet:parquet-column",
    "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-jackson",
    "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-databind",
    "com.fasterxml.jackson.core:jackson-annotations",
    "org.apache.logging.log4j:log4j-api",
    "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl",
    "org.slf4j:slf4j-api",
    "org.xerial.snappy:snappy-java",
    "com.github.luben:zstd-jni",
    "org.lz4:lz4-java",
    "at.yawk.lz4:lz4-java",
    "org.scala-lang:scala-library",
    "org.scala-lang.modules:scala-parallel-collections_2.13",
    "org.roaringbitmap:RoaringBitmap",
    "org.roaringbitmap:shims",
    "io.airlift:aircompressor",
    "com.google.code.findbugs:jsr305",
    "commons-pool:commons-pool",
    "org.locationtech.jts:jts-core",
)


def _manifest(settings: SparkSettings) -> Path:
    digest = hashlib.sha256("\n".join([*settings.packages, *PROVIDED_BY_SPARK]).encode())
    return settings.jars_cache / f"manifest-{digest.hexdigest()[:16]}.txt"


def cached_jars(settings: SparkSettings) -> list[str] | None:
    """The resolved JAR files of ``settings.packages``, or None when not fetched yet."""
    manifest = _manifest(settings)
    if not manifest.is_file():
        return None
    jars = [line for line in manifest.read_text().splitlines() if line]
    return jars if jars and all(Path(jar).is_file() for jar in jars) else None


def jar_conf(settings: SparkSettings) -> dict[str, str]:
    """Spark settings that put the packages on the classpath, from the cache when possible."""
    if not settings.packages:
        return {}
    jars = cached_jars(settings)
    if jars is not None:
        return {"spark.jars": ",".join(jars)}
    log.info("fetching %s from Maven Central (once; cached in %s)",
             ", ".join(settings.packages), settings.jars_cache)
    return {
        "spark.jars.packages": ",".join(settings.packages),
        "spark.jars.excludes": ",".join(PROVIDED_BY_SPARK),
        "spark.jars.ivy": str(settings.jars_cache / "ivy"),
    }


def remember_resolved(settings: SparkSettings, resolved: str | None) -> None:
    """Record the files Ivy resolved (Spark's ``spark.jars`` after start) for later sessions."""
    if not settings.packages or not resolved or cached_jars(settings) is not None:
        return
    jars = [unquote(urlparse(uri).path) if "://" in uri else uri for uri in resolved.split(",")]
    jars = [jar for jar in jars if jar.endswith(".jar") and Path(jar).is_file()]
    if jars:
        manifest = _manifest(settings)
        manifest.parent.mkdir(parents=True, exist_ok=True)
        # Renamed into place: a crash mid-write leaves no manifest rather than a short one.
        temporary = manifest.with_name(f".{manifest.name}.{os.getpid()}.tmp")
        temporary.write_text("\n".join(jars) + "\n")
        temporary.replace(manifest)
        log.info("cached %d JARs (manifest %s)", len(jars), manifest)

