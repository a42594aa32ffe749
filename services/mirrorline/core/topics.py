"""Names of the internal topics Mirrorline writes that MM2 does not have.

MM2's own names (offset syncs, checkpoints, heartbeats, Connect offsets) come from the
replication policy and `mirrorline.core.progress`; these are Mirrorline's additions. All
end in `.internal`, so no flow ever mirrors them.
"""

from __future__ import annotations


def offset_map_topic(source_alias: str) -> str:
    """The dense offset map of flows from `source_alias`, kept on the target cluster."""
    return f"mirrorline-offset-map.{source_alias}.internal"


#: How long offset-map records are kept: a group committed further back than this falls
#: back to MM2's sparse offset syncs, with their duplicate bound. A day of one record per
#: replicating partition per second stays quick to read when a checkpointer starts.
OFFSET_MAP_RETENTION_MS = 24 * 3600 * 1000
