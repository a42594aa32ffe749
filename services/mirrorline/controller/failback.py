"""Failback: after failing over from A to B, bring A back by mirroring B -> A.

Records written to A after its last mirrored offset never reached B: after a failover
they have *diverged* (consumers on B never saw them, new records on B are not on A). The
plan reports them per partition and names the groups with offsets on A. Executing creates
the reverse flow with the forward flow's definition. Optionally -- the "scrape" option,
destructive, so it needs the confirmation text the plan gives -- it first deletes A's
data of the chosen topics (deleted and recreated with the same partitions and configs)
and the committed offsets of groups that only consumed those topics, so that A holds
exactly what comes back from B.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mirrorline.core.control import FlowRecord
from mirrorline.core.failover import diverged
from mirrorline.core.fencing import scrape_refusal
from mirrorline.core.filters import GroupFilter, TopicFilter
from mirrorline.core.flowdefs import Definition, flow_settings
from mirrorline.core.settings import MirrorSettings
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec
from mirrorline.kafka.clients import build, consumer_kwargs
from mirrorline.kafka.groups import GroupOffsets
from mirrorline.kafka.progress import read_progress
from mirrorline.kafka.watermarks import high_watermarks
from mirrorline.v1 import failover_pb2

log = logging.getLogger(__name__)


class FailbackError(Exception):
    """Something the operator must fix first; the message says what (FAILED_PRECONDITION)."""


class ScrapeRefused(FailbackError):
    """A scrape named topics that are not the flow's (INVALID_ARGUMENT)."""


def confirmation(record: FlowRecord) -> str:
    return f"scrape {record.source}"


@dataclass
class Failback:
    deployment: MirrorSettings
    record: FlowRecord
    old_primary: ClusterAdmin          # the forward flow's source (A)
    new_primary: ClusterAdmin          # its target (B)
    warnings: list[str] = field(default_factory=list)

    @property
    def reverse(self) -> str:
        return f"{self.record.target}->{self.record.source}"

    def _settings(self) -> Any:
        return flow_settings(self.deployment, Definition(
            self.record.source, self.record.target, self.record.properties))

    def refusal(self) -> Callable[[str], str | None]:
        """Why a topic is not the flow's to scrape (`mirrorline.core.fencing`), or None."""
        flow = self._settings()
        topic_filter = TopicFilter(flow.topics, flow.topics_exclude)
        policy = flow.replication_policy
        return lambda topic: scrape_refusal(topic, topic_filter=topic_filter, policy=policy,
                                            target_alias=self.record.target)

    async def topics(self) -> dict[str, int]:
        """The forward flow's own topics on the old primary, with their partition counts."""
        refusal = self.refusal()
        return {t: n for t, n in (await self.old_primary.topic_partitions()).items()
                if refusal(t) is None}

    async def plan(self, reverse_exists: bool) -> failover_pb2.FailbackPlan:
        flow = self._settings()
        try:
            topics = await self.topics()
        except Exception as exc:
            raise FailbackError(f"the old primary {self.record.source!r} does not answer "
                                f"({exc!r}); bring it back before planning a failback") from exc
        ends = await high_watermarks(build(consumer_kwargs, flow.clients.source_consumer,
                                           "failback-planner"), topics)
        mirrored = await read_progress(build(consumer_kwargs, flow.clients.target_consumer,
                                             "failback-planner"), self.record.source)
        plan = failover_pb2.FailbackPlan(flow=self.record.name, reverse_flow=self.reverse,
                                         reverse_exists=reverse_exists,
                                         confirm=confirmation(self.record))
        for tp, end in sorted(ends.items()):
            nxt = mirrored.get((tp.topic, tp.partition), 0)
            plan.diverged.add(topic=tp.topic, partition=tp.partition, old_primary_end=end,
                              mirrored_next=nxt, diverged_records=diverged(end, nxt))
        plan.groups_on_old_primary.extend(sorted(await self._groups(topics)))
        total = sum(d.diverged_records for d in plan.diverged)
        if total:
            plan.notes.append(f"{total} records were written on {self.record.source} after "
                              f"its last mirrored offsets and never reached "
                              f"{self.record.target}; mirroring back does not remove them "
                              "-- scrape to start the old primary afresh")
        if flow.policy.kind == "default":
            plan.notes.append(f"with the default policy, records mirrored back land in "
                              f"'{self.record.target}.<topic>' on {self.record.source}")
        if not self.record.paused:
            plan.notes.append(f"{self.record.name} is still running: pause it (or delete it) "
                              "before failing back; scraping requires it")
        if reverse_exists:
            plan.notes.append(f"the reverse flow {self.reverse} exists already")
        return plan

    async def _groups(self, topics: Mapping[str, int]) -> dict[str, bool]:
        """Groups with offsets on `topics` -> whether those are their only offsets."""
        groups = GroupOffsets(self.old_primary)
        all_topics = await self.old_primary.topic_partitions()
        chosen = [(t, p) for t, n in topics.items() for p in range(n)]
        others = [(t, p) for t, n in all_topics.items() if t not in topics for p in range(n)]
        found: dict[str, bool] = {}
        for group in await groups.list_groups():
            if await groups.committed(group, chosen):
                found[group] = not await groups.committed(group, others)
        return found

    async def scrape(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """Delete and recreate the old primary's topics; delete groups that only read them."""
        names = list(names)
        refusal = self.refusal()
        refused = [f"{t} ({why})" for t in sorted(set(names)) if (why := refusal(t)) is not None]
        if refused:
            raise ScrapeRefused(f"not topics of flow {self.record.name}; a scrape never "
                                f"touches them: {', '.join(refused)}")
        topics = await self.topics()
        chosen = {t: topics[t] for t in names if t in topics}
        missing = sorted(set(names) - set(chosen))
        if missing:
            raise FailbackError(f"not topics of flow {self.record.name} on "
                                f"{self.record.source}: {', '.join(missing)}")
        flow = self._settings()
        group_filter = GroupFilter(flow.groups, flow.groups_exclude)
        exclusive = {g: only for g, only in (await self._groups(chosen)).items()
                     if group_filter.accepts(g)}
        configs = await self.old_primary.topic_configs(chosen)
        deleted = await self.old_primary.delete_topics(list(chosen))
        for topic, error in deleted.items():
            if error:
                raise FailbackError(f"cannot delete {topic!r} on {self.record.source}: {error}")
        specs = [TopicSpec(t, n, -1, {e.name: e.value for e in configs.get(t, [])
                                      if not e.is_default and e.value is not None
                                      and not e.read_only})
                 for t, n in chosen.items()]
        await self.old_primary.recreate_topics(specs)
        groups = GroupOffsets(self.old_primary)
        only = [g for g, exclusive_to_chosen in exclusive.items() if exclusive_to_chosen]
        results = await groups.delete_groups(only)
        for group, error in results.items():
            if error:
                self.warnings.append(f"group {group}: offsets not deleted: {error}")
        for group, exclusive_to_chosen in exclusive.items():
            if not exclusive_to_chosen:
                self.warnings.append(
                    f"group {group} also consumes other topics on {self.record.source}; its "
                    "offsets for the scraped topics were left (they now point past the new, "
                    "empty logs, so its consumers restart per auto.offset.reset)")
        return sorted(chosen), sorted(g for g, e in results.items() if not e)
