"""The pipeline's description: every component reads what an earlier one writes (or an
entry point), and the speed layer runs exactly the components it describes."""

import subprocess
import sys

import pytest

from abstream import topology
from abstream.speed import COMPONENTS

ENTRIES = {topology.LANDING, topology.TOPIC}


@pytest.mark.parametrize("source", sorted(topology.PIPELINES))
def test_each_component_reads_an_entry_or_what_an_earlier_one_wrote(source):
    written = set(ENTRIES)
    for node in topology.PIPELINES[source]:
        assert set(node.reads) <= written, f"{node.name} reads what nothing before it writes"
        written |= set(node.writes)
    assert {topology.EVENTS, topology.SESSIONS, topology.EXPERIMENT_METRICS} <= written


def test_the_speed_layer_runs_the_described_components():
    assert {name: c.node for name, c in COMPONENTS.items()} == topology.NODES


def test_bronze_is_reached_through_the_entry_components():
    assert [n.name for n in topology.upstream_of(topology.EVENTS, topology.FILES)] == ["ingest"]
    assert [n.name for n in topology.upstream_of(topology.EVENTS, topology.KAFKA)] == [
        "validate", "archive"]
    assert topology.writer_of(topology.EXPERIMENT_METRICS, topology.KAFKA).name == "sessionize"


def test_the_exporter_and_lag_load_without_spark():
    probe = ("import sys, abstream.monitor.exporter, abstream.lag.table, abstream.topology; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('pyspark', 'py4j', 'delta')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
