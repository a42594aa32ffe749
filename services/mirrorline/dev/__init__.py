"""Developer tooling: local Kafka-compatible brokers (Tansu) for the CLI, the demo and tests."""
