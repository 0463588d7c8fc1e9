"""Synthetic beacons: a simulated population of visitors, to files or to Kafka."""

from abstream.generator.write import (
    GenerationSummary,
    GeneratorSettings,
    generate,
    generate_to_kafka,
)

__all__ = ["GenerationSummary", "GeneratorSettings", "generate", "generate_to_kafka"]
