"""The config-sync service: topic configs, partition counts and ACLs kept in step."""
