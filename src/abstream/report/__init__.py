"""Experiment reports: comparisons of variants with their statistics."""
