"""Kafka: a local single-node broker for development and tests."""
