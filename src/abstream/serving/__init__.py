"""Serving: one view over both layers (final where the batch layer covers, provisional
elsewhere) and totals over it."""

from abstream.serving.view import (
    create_view_statement,
    definitions_view,
    serving_view,
    serving_visits,
)

__all__ = ["create_view_statement", "definitions_view", "serving_view", "serving_visits"]
