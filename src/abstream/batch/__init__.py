"""The batch layer: recomputes closed time ranges of silver and gold from bronze."""

from abstream.batch.layer import BatchRequest, BatchResult, run_batch

__all__ = ["BatchRequest", "BatchResult", "run_batch"]
