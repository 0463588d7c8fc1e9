"""How far a deployment has read the input its replicas share, from its first component's
checkpoint (no Spark): per partition of the Kafka input topic (``kafka.topic``), the next
offset its last committed micro-batch planned; or, for the landing folder, how many of its
files were taken. Replicas reading the same input can be compared by it (Kafka Streams
compares a standby's changelog position the same way, KIP-441)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from abstream import topology
from abstream.config import Config
from abstream.io.checkpoint_log import CheckpointReader
from abstream.layout import Layout

#: The unit a landing folder's position counts.
FILES = "files"


@dataclass(frozen=True)
class InputPosition:
    """Read-through counts: ``topic/partition`` -> next offset, or ``files`` -> files taken."""

    units: Mapping[str, int]

    def at_or_past(self, other: InputPosition | None) -> bool:
        """Whether everything ``other`` had read is read here too (``other`` None: nothing
        was)."""
        return other is None or all(self.units.get(unit, 0) >= count
                                    for unit, count in other.units.items())

    def behind(self, other: InputPosition | None) -> int:
        """Offsets (or files) ``other`` had read that are not read here yet."""
        return 0 if other is None else sum(max(0, count - self.units.get(unit, 0))
                                           for unit, count in other.units.items())

    def to_json(self) -> dict[str, int]:
        return dict(sorted(self.units.items()))

    @classmethod
    def from_json(cls, value: Mapping[str, int] | None) -> InputPosition | None:
        return None if value is None else cls({str(k): int(v) for k, v in value.items()})

    def __str__(self) -> str:
        if set(self.units) == {FILES}:
            return f"{self.units[FILES]:,} files"
        return ", ".join(f"{unit}@{count:,}" for unit, count in sorted(self.units.items()))


class PositionReader:
    """Reads the position of the deployment at ``layout`` (its first component's checkpoint)
    each time it is asked."""

    def __init__(self, layout: Layout, config: Config) -> None:
        first = topology.PIPELINES[config.source][0]
        self.layout, self.source, self.topic = layout, config.source, config.kafka.topic
        self.checkpoint = CheckpointReader(layout.checkpoint(first.name))

    def read(self) -> InputPosition:
        """The position now; empty before the first micro-batch committed."""
        committed = self.checkpoint.committed()
        if committed is None:
            return InputPosition({})
        if self.source == topology.KAFKA:
            offsets = next((o[self.topic] for o in committed.offsets
                            if o is not None and isinstance(o.get(self.topic), dict)), {})
            return InputPosition({f"{self.topic}/{partition}": int(offset)
                                  for partition, offset in offsets.items()})
        index = self.checkpoint.file_source_index(self.layout.landing)
        offset = committed.offsets[index] if index is not None \
            and index < len(committed.offsets) else None
        if not offset or "logOffset" not in offset:
            return InputPosition({FILES: 0})
        taken = self.checkpoint.processed_files(index, int(offset["logOffset"]))
        return InputPosition({FILES: len(taken)})
