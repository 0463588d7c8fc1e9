"""Kafka: topics, clients, and a local single-node broker for development and tests."""
