"""Everything that talks to Kafka through aiokafka: client settings, admin, producers, consumers."""
