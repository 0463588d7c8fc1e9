"""The pipeline's shape, without Spark: its layers, places, components, what each component
reads and writes, and the components each kind of source runs.

Every other module takes these names from here: a component, table or layer is named once.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Layers, as the ``layer`` column of silver and gold holds them: the speed layer's rows are
#: provisional, the batch layer's final where it has covered their range.
SPEED = "speed"
BATCH = "batch"

#: The populations an experiment's numbers are computed for: every visit that lists it
#: (``assigned``), and the visits exposed to it, from their first exposure (``qualified``).
POPULATIONS = ("assigned", "qualified")

#: The folder under the data dir where beacon files arrive (``source: files``).
LANDING = "landing"

#: Delta tables under the data dir's ``tables/``.
EVENTS = "events"  # bronze: every accepted beacon, once
REJECTED = "rejected"  # quarantine: what failed the checks, and why
SESSIONS = "sessions"  # silver: visits
EXPERIMENT_METRICS = "experiment_metrics"  # gold: metrics per experiment, variant, window
DEFINITION_METRICS = "definition_metrics"  # gold: each catalog metric's totals, per window
BATCH_COVERAGE = "batch_coverage"  # the time ranges the batch layer has recomputed
EXPERIMENT_RESULTS = "experiment_results"  # published experiment reports

#: The tables the pipeline's components write (the exporter reports their versions).
PIPELINE_TABLES = (EVENTS, REJECTED, SESSIONS, EXPERIMENT_METRICS, DEFINITION_METRICS)

#: Kafka topics, named by the ``kafka.*`` setting that holds the topic's name.
TOPIC_PREFIX = "kafka."
TOPIC = "kafka.topic"
VALID_TOPIC = "kafka.valid_topic"
REJECTED_TOPIC = "kafka.rejected_topic"

#: Kinds of source: beacon files in the landing folder, or a Kafka topic.
FILES = "files"
KAFKA = "kafka"


@dataclass(frozen=True)
class Node:
    """A component: one streaming query, with its own checkpoint, from its inputs to its
    outputs (places above: folders, tables or topics)."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...]


INGEST = Node("ingest", reads=(LANDING,), writes=(EVENTS, REJECTED))
VALIDATE = Node("validate", reads=(TOPIC,), writes=(VALID_TOPIC, REJECTED_TOPIC))
ARCHIVE = Node("archive", reads=(VALID_TOPIC, REJECTED_TOPIC), writes=(EVENTS, REJECTED))
SESSIONIZE = Node("sessionize", reads=(EVENTS,),
                  writes=(SESSIONS, EXPERIMENT_METRICS, DEFINITION_METRICS))

NODES: dict[str, Node] = {n.name: n for n in (INGEST, VALIDATE, ARCHIVE, SESSIONIZE)}

#: The components of each kind of source, in pipeline order.
PIPELINES: dict[str, tuple[Node, ...]] = {
    FILES: (INGEST, SESSIONIZE),
    KAFKA: (VALIDATE, ARCHIVE, SESSIONIZE),
}


def is_topic(place: str) -> bool:
    return place.startswith(TOPIC_PREFIX)


def upstream_of(table: str, source: str) -> tuple[Node, ...]:
    """The components of ``source`` that run before the first reader of ``table``."""
    nodes = PIPELINES[source]
    readers = [i for i, node in enumerate(nodes) if table in node.reads]
    return nodes[:readers[0]] if readers else nodes


def writer_of(table: str, source: str) -> Node:
    """The component of ``source`` that writes ``table``."""
    return next(node for node in PIPELINES[source] if table in node.writes)
