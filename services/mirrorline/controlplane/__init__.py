"""Reading and writing the control plane's Kafka topics (the control log and the lease)."""
