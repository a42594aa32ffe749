"""The checkpointer: MM2 checkpoints, group-offset sync, exact offset translation, failover."""
