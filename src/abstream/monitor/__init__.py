"""Monitoring: which queries and tables to watch (from the config), the Prometheus exporter,
and the metrics of running components."""
