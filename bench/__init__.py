"""The benchmarks and the chaos harness, each run as ``python -m bench.NAME`` from the
repository root; what they share is in ``bench.common``."""
