"""One flow's config sync: describe both sides, plan, and apply (or only report) the plan.

A round reads the source and target topics, their configs and (when due) ACLs, builds the
drift plan with the pure core (`mirrorline.core.drift`), and -- with `sync.mode = apply`
-- applies it: incremental config changes per topic, partition growth, ACL creation and
(full mode) removal. A failure is reported for its topic and key, and the rest goes on.
With `sync.mode = plan` the round only reports: the plan's change count is a metric and
the flow's status, and a new set of differences is logged and recorded once as a "drift
detected" event in the flow's history topic (`mirrorline.core.drift.drift_event`).

What a cluster cannot do is probed first (`mirrorline.kafka.capabilities`) and re-probed
only every `PROBE_S`, so a broker without CreatePartitions or ACLs costs one ApiVersions
request per few minutes, not a retry storm.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mirrorline.configsync.records import SyncRecords
from mirrorline.core.aclsync import AclBinding, AclPlan, AclRules, plan_acls
from mirrorline.core.drift import (
    DriftPlan,
    HistoryEntry,
    TopicDrift,
    TopicSides,
    build_plan,
    drift_event,
    topic_drift,
)
from mirrorline.core.filters import (
    ConfigEntry,
    ConfigOp,
    ConfigPropertyFilter,
    GroupFilter,
    TopicFilter,
    should_replicate_topic,
)
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.admin import ClusterAdmin, UnsupportedByBroker
from mirrorline.kafka.capabilities import Capabilities, probe
from mirrorline.kafka.syncadmin import (
    alter_topic_configs,
    create_acls,
    delete_acls,
    describe_acls,
)

log = logging.getLogger(__name__)

#: How long a capability answer is trusted before ApiVersions is asked again.
PROBE_S = 300.0


@dataclass
class RoundResult:
    plan: DriftPlan
    applied: list[HistoryEntry] = field(default_factory=list)


class FlowSync:
    """Plans and applies one flow's sync against already started admin clients."""

    def __init__(self, flow: FlowSettings, *, source: ClusterAdmin, target: ClusterAdmin,
                 records: SyncRecords, clock: Callable[[], float] = time.time) -> None:
        self.flow = flow
        self.policy = flow.replication_policy
        self._source = source
        self._target = target
        self.records = records
        self._clock = clock
        self._filter = TopicFilter(flow.topics, flow.topics_exclude)
        self._config_filter = ConfigPropertyFilter(flow.config_properties_exclude,
                                                   flow.use_defaults_from)
        self._rules = AclRules(replicates_topic=self.selects,
                               remote_name=flow.remote_topic,
                               groups=GroupFilter(flow.groups, flow.groups_exclude),
                               mode=flow.sync_topic_acls_mode)
        self._timeout = max(1.0, flow.admin_timeout_ms / 1000)
        self._caps: dict[str, tuple[float, Capabilities]] = {}
        #: The last plan (None before the first round) and the last round's failure.
        self.last_plan: DriftPlan | None = None
        self.error: str | None = None
        self._lock = asyncio.Lock()
        self._last_acl_round = float("-inf")
        self._last_acl_plan: AclPlan | None = None
        self._acl_unavailable: str | None = None
        #: Source topic -> remote topic, for every topic replicated in an earlier round:
        #: how a vanished source is noticed under a policy that does not rename.
        self._seen: dict[str, str] = {}
        self._renames = flow.remote_topic("t") != "t"
        self._refused: dict[tuple[str, str], tuple[str, str]] = {}

    def selects(self, topic: str) -> bool:
        return should_replicate_topic(
            topic, policy=self.policy, topic_filter=self._filter,
            target_alias=self.flow.naming_target,
            heartbeats_replication_enabled=self.flow.heartbeats_replication_enabled,
            canary_enabled=self.flow.canary.enabled)

    async def _capabilities(self, admin: ClusterAdmin) -> Capabilities:
        cached = self._caps.get(admin.alias)
        now = time.monotonic()
        if cached is not None and now - cached[0] < PROBE_S:
            return cached[1]
        caps = await probe(admin, self._timeout)
        self._caps[admin.alias] = (now, caps)
        return caps

    def _forget_capabilities(self) -> None:
        self._caps.clear()

    # -- planning -------------------------------------------------------------------
    async def plan(self, *, topic: str | None = None, acls: bool = True) -> DriftPlan:
        """The current drift plan; `acls=False` reuses the last ACL answer (or none)."""
        flow = self.flow
        unavailable: dict[str, str] = {}
        source_caps = await self._capabilities(self._source)
        target_caps = await self._capabilities(self._target)
        configs_off = target_caps.unavailable("IncrementalAlterConfigs")
        partitions_off = target_caps.unavailable("CreatePartitions")
        if not flow.sync_topic_configs_enabled:
            unavailable["configs"] = "disabled (sync.topic.configs.enabled = false)"
        elif configs_off:
            unavailable["configs"] = configs_off
        if partitions_off:
            unavailable["partitions"] = partitions_off
        topics = await self._topic_drift(topic, configs_off, partitions_off)
        acl_plan: AclPlan | None = None
        if not flow.sync_topic_acls_enabled:
            unavailable["acls"] = "disabled (sync.topic.acls.enabled = false)"
        elif acls:
            acl_plan = await self._plan_acls(source_caps, target_caps)
            self._last_acl_plan = acl_plan
        else:
            acl_plan = self._last_acl_plan
        if flow.sync_topic_acls_enabled and self._acl_unavailable:
            unavailable["acls"] = self._acl_unavailable
        if topic is not None and acl_plan is not None:
            acl_plan = AclPlan(tuple(a for a in acl_plan.add if _about(a, topic, self)),
                               tuple(a for a in acl_plan.remove if _about(a, topic, self)),
                               acl_plan.owned_after)
        return build_plan(flow.name, int(self._clock() * 1000), topics, acl_plan, unavailable)

    async def _topic_drift(self, only: str | None, configs_off: str | None,
                           partitions_off: str | None) -> list[TopicDrift]:
        flow = self.flow
        source_topics = await self._source.topic_partitions()
        selected = {t: n for t, n in source_topics.items() if self.selects(t)}
        target_topics = await self._target.topic_partitions()
        # Remote topics of this flow whose source topic is gone: reported, left alone. A
        # renaming policy says so by name (also after a restart); without renaming, a
        # target topic is only known to be a copy if an earlier round saw its source.
        vanished = {t: r for t, r in self._seen.items()
                    if t not in source_topics and r in target_topics}
        for candidate in target_topics if self._renames else ():
            if self.policy.topic_source(candidate) != flow.naming_source:
                continue
            upstream = self.policy.upstream_topic(candidate)
            if (upstream is not None and upstream not in source_topics
                    and self.selects(upstream)
                    and candidate != flow.checkpoints_topic):
                vanished[upstream] = candidate
        names = [t for t in selected if only is None or t == only]
        remote = {t: flow.remote_topic(t) for t in names}
        present = [t for t in names if remote[t] in target_topics]
        sync_configs = flow.sync_topic_configs_enabled
        source_configs: dict[str, list[ConfigEntry]] = {}
        target_configs: dict[str, list[ConfigEntry]] = {}
        if sync_configs and present:
            source_configs = await self._source.topic_configs(present)
            target_configs = await self._target.topic_configs([remote[t] for t in present])
        out = [topic_drift(TopicSides(
            t, remote[t], selected[t], target_topics.get(remote[t]),
            source_configs.get(t), target_configs.get(remote[t])),
            self._config_filter, configs_unavailable=configs_off,
            partitions_unavailable=partitions_off, sync_configs=sync_configs)
            for t in names]
        out += [topic_drift(TopicSides(t, r, None, target_topics[r], None, None),
                            self._config_filter)
                for t, r in vanished.items() if only is None or t == only]
        if only is None:
            # A vanished topic stays known while its copy exists, so every later round
            # (and every later plan) reports it, not only the first one after it went.
            self._seen = {t: remote[t] for t in present} | vanished
        elif only not in selected and only not in vanished:
            out.append(TopicDrift(only, flow.remote_topic(only),
                                  problem=f"{only!r} is not a source topic this flow "
                                          "replicates (topics, topics.exclude)"))
        return out

    async def _plan_acls(self, source_caps: Capabilities,
                         target_caps: Capabilities) -> AclPlan | None:
        self._acl_unavailable = (source_caps.acls_unavailable(write=False)
                                 or target_caps.acls_unavailable(write=True))
        if self._acl_unavailable:
            return None
        try:  # a failure here must not stop config and partition sync
            source = await describe_acls(self._source, self._timeout)
            target = await describe_acls(self._target, self._timeout)
        except Exception as exc:
            self._acl_unavailable = f"failed this round (retried next round): {exc!r}"
            return None
        return plan_acls(source, target, self.records.owned, self._rules)

    # -- applying -------------------------------------------------------------------
    async def apply(self, plan: DriftPlan, who: str) -> list[HistoryEntry]:
        """Apply `plan`; every change (done or refused) is recorded in the history."""
        async with self._lock:
            entries = await self._apply_topics(plan, who)
            entries += await self._apply_acls(plan, who)
            entries = [e for e in entries if self._news(e)]
            if entries:
                await self.records.record(entries)
                for entry in entries:
                    if entry.ok:
                        log.info("%s: %s: %s (%s)", self.flow.name, entry.subject,
                                 entry.detail, entry.who)
                    else:
                        log.warning("%s: %s: %s refused: %s", self.flow.name, entry.subject,
                                    entry.detail, entry.error)
            return entries

    def _news(self, entry: HistoryEntry) -> bool:
        """False for a periodic round's refusal identical to the last one recorded for the
        same subject: a value the target keeps refusing is recorded once, not every round."""
        key = (entry.kind, entry.subject)
        if entry.ok:
            self._refused.pop(key, None)
            return True
        seen = self._refused.get(key)
        self._refused[key] = (entry.detail, entry.error)
        return entry.who != "configsync" or seen != (entry.detail, entry.error)

    def _entry(self, who: str, kind: str, subject: str, detail: str,
               error: str | None = None) -> HistoryEntry:
        return HistoryEntry(int(self._clock() * 1000), self.flow.name, who, kind, subject,
                            detail, error is None, error or "")

    async def _apply_topics(self, plan: DriftPlan, who: str) -> list[HistoryEntry]:
        entries: list[HistoryEntry] = []
        ops: dict[str, list[ConfigOp]] = {}
        for drift in plan.topics:
            changes = [c for c in drift.configs if c.changes]
            if changes:
                ops[drift.remote_topic] = [
                    ConfigOp(c.key, "set", c.source_value) if c.action == "set"
                    else ConfigOp(c.key, "delete", None) for c in changes]
        results: dict[str, str | None] = {}
        for remote, topic_ops in ops.items():  # one request per topic: failures stay local
            try:
                results.update(await alter_topic_configs(self._target, {remote: topic_ops},
                                                         self._timeout))
            except Exception as exc:
                results[remote] = f"{exc!r}"
        for drift in plan.topics:
            for c in drift.configs:
                if not c.changes:
                    continue
                detail = (f"set {c.key}={c.source_value} (was {c.target_value})"
                          if c.action == "set" else
                          f"delete {c.key} (was {c.target_value}; the source uses its "
                          "default)")
                entries.append(self._entry(who, "config", f"{drift.remote_topic} {c.key}",
                                           detail, results.get(drift.remote_topic)))
            part = drift.partitions
            if part is not None and part.action == "grow":
                error: str | None = None
                try:
                    await self._target.create_partitions(drift.remote_topic, part.source)
                except (UnsupportedByBroker, RuntimeError) as exc:
                    error = str(exc)
                    self._forget_capabilities()
                entries.append(self._entry(
                    who, "partitions", drift.remote_topic,
                    f"grow from {part.target} to {part.source} partitions", error))
        return entries

    async def _apply_acls(self, plan: DriftPlan, who: str) -> list[HistoryEntry]:
        if not plan.acls_add and not plan.acls_remove:
            return []
        entries: list[HistoryEntry] = []
        owned = set(self.records.owned)
        try:
            created = await create_acls(self._target, plan.acls_add, self._timeout)
        except Exception as exc:  # e.g. a broker that never answers: do not retry at once
            created = dict.fromkeys(plan.acls_add, f"{exc!r}")
            self._forget_capabilities()
        for binding, error in created.items():
            if error is None:
                owned.add(binding)
            entries.append(self._entry(who, "acl-add", str(binding), "create ACL", error))
        removable = [b for b in plan.acls_remove if b in owned]  # never what we did not make
        try:
            deleted = await delete_acls(self._target, removable, self._timeout)
        except Exception as exc:
            deleted = dict.fromkeys(removable, f"{exc!r}")
        for binding, error in deleted.items():
            if error is None:
                owned.discard(binding)
            entries.append(self._entry(who, "acl-remove", str(binding),
                                       "delete ACL (created by this flow, gone upstream)",
                                       error))
        await self.records.set_owned(owned)
        # Applied: topic-only rounds until the next ACL round must not apply it again.
        self._last_acl_plan = None
        return entries

    # -- one round ------------------------------------------------------------------
    async def round(self, *, acls: bool) -> RoundResult:
        """Plan, and apply unless `sync.mode = plan`."""
        plan = await self.plan(acls=acls)
        previous, self.last_plan = self.last_plan, plan
        before = previous.unavailable if previous is not None else {}
        for feature, why in plan.unavailable.items():
            if before.get(feature) != why:  # once per change, not every round
                log.warning("%s: %s sync %s", self.flow.name, feature, why)
        if self.flow.sync_mode == "plan":
            if plan.changes and (previous is None or _shape(previous) != _shape(plan)):
                log.warning("%s: drift: %d change(s) pending review (sync.mode = plan); see "
                            "`mirrorline admin drift %s`", self.flow.name, plan.changes,
                            self.flow.name)
            async with self._lock:  # not interleaved with an operator's `drift apply`
                event = drift_event(plan, self.records.history)
                if event is not None:
                    await self.records.record([event])
            return RoundResult(plan)
        applied = await self.apply(plan, "configsync") if plan.changes else []
        return RoundResult(plan, applied)


def _about(binding: AclBinding, topic: str, sync: FlowSync) -> bool:
    return binding.resource_type == "TOPIC" and binding.name == \
        sync.flow.remote_topic(topic)


def _shape(plan: DriftPlan) -> tuple[object, ...]:
    """What a plan would change, without values that move by themselves (time)."""
    return (plan.topics, plan.acls_add, plan.acls_remove)
