"""What a flow's destructive operations may touch: its own topics and groups, nothing else.

A scrape deletes topics on the old primary and a failover commits offsets on the target.
Both are fenced here, independently of what the caller names: a scrape touches only
topics the flow itself replicates -- accepted by its filter, never an internal topic
(`__*`, `.*`, `*.internal`, `*-internal`: MM2's offsets, offset syncs and checkpoints,
Mirrorline's control log, lease and offset map), never a heartbeats topic, never a topic
that came from the flow's own target -- and a failover commits only groups the flow's
group filter covers.
"""

from __future__ import annotations

from collections.abc import Iterable

from mirrorline.core.filters import NamePredicate
from mirrorline.core.policy import ReplicationPolicy, is_cycle


def scrape_refusal(topic: str, *, topic_filter: NamePredicate, policy: ReplicationPolicy,
                   target_alias: str) -> str | None:
    """Why `topic` may not be scraped for the flow, or None when it may."""
    if policy.is_internal_topic(topic):
        return "an internal topic"
    if policy.is_heartbeats_topic(topic):
        return "a heartbeats topic"
    if is_cycle(policy, topic, target_alias):
        return f"mirrored from {target_alias}, not a source topic of the flow"
    if not topic_filter.accepts(topic):
        return "outside the flow's topics filter"
    return None


def foreign_groups(groups: Iterable[str], group_filter: NamePredicate) -> list[str]:
    """The groups the flow's filter does not cover (a failover must not touch them)."""
    return sorted({g for g in groups if not group_filter.accepts(g)})
