"""Metric sources: one small interface (``source.MetricSource``), one implementation per file."""
