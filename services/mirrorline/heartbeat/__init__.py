"""The heartbeat service: MM2 heartbeats, replication topology, the canary and the audit."""
