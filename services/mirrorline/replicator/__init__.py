"""The replicator service: copies records of its partitions from source to target clusters."""
