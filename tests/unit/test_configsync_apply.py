"""Applying a drift plan: a refused change stays with its topic and key, the rest goes on;
ACL removal is limited to what the service created.

The clusters here are stand-ins: the local broker (Tansu) accepts every config value, even
for topics that do not exist, and has no ACL API to refuse or accept anything, so a
refusing target cannot exist in this environment. The stand-ins replace only the three
request functions (`alter_topic_configs`, `create_acls`, `delete_acls`) and the history
topic; the planning and bookkeeping under test are the product's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pytest

from mirrorline.configsync import flow as flow_module
from mirrorline.configsync.flow import FlowSync
from mirrorline.core.aclsync import AclBinding
from mirrorline.core.config import parse_config
from mirrorline.core.drift import DriftPlan, HistoryEntry, TopicDrift
from mirrorline.core.filters import ConfigOp
from mirrorline.core.topicsync import ConfigAction
from mirrorline.kafka.capabilities import API_KEYS, Capabilities

CONFIG = ("clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\n"
          "a->b.enabled = true\n")


class Records:
    def __init__(self, owned: Iterable[AclBinding] = ()) -> None:
        self.history: list[HistoryEntry] = []
        self.owned = set(owned)

    async def record(self, entries: Iterable[HistoryEntry]) -> None:
        self.history.extend(entries)

    async def set_owned(self, owned: Iterable[AclBinding]) -> None:
        self.owned = set(owned)


class Target:
    alias = "b"


def acl(name: str) -> AclBinding:
    return AclBinding("TOPIC", name, "LITERAL", "User:x", "*", "READ", "ALLOW")


def sync(records: Records) -> FlowSync:
    flow = parse_config(CONFIG).flows["a->b"]
    return FlowSync(flow, source=Target(), target=Target(),  # type: ignore[arg-type]
                    records=records)  # type: ignore[arg-type]


def config_drift(topic: str, key: str, value: str) -> TopicDrift:
    return TopicDrift(topic, f"a.{topic}", (ConfigAction(key, value, "old", "set"),))


async def test_a_refused_value_is_reported_for_its_topic_and_key_and_the_rest_applies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []

    async def alter(_admin: object, topics: Mapping[str, Sequence[ConfigOp]],
                    _timeout: float) -> dict[str, str | None]:
        (topic,) = topics
        sent.append(topic)
        if topic == "a.slow":
            raise TimeoutError()
        return {topic: "POLICY_VIOLATION: no" if topic == "a.bad" else None}

    monkeypatch.setattr(flow_module, "alter_topic_configs", alter)
    records = Records()
    plan = DriftPlan("a->b", 0, (config_drift("bad", "retention.ms", "1"),
                                 config_drift("slow", "segment.ms", "2"),
                                 config_drift("good", "retention.ms", "3")))
    entries = await sync(records).apply(plan, "operator")
    assert sorted(sent) == ["a.bad", "a.good", "a.slow"]
    outcome = {e.subject: (e.ok, e.error) for e in entries}
    assert outcome["a.bad retention.ms"] == (False, "POLICY_VIOLATION: no")
    assert outcome["a.slow segment.ms"][0] is False
    assert outcome["a.good retention.ms"] == (True, "")
    assert records.history == entries
    assert all(e.who == "operator" for e in entries)


async def test_acls_it_did_not_create_are_never_deleted_even_if_a_plan_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    deleted: list[AclBinding] = []

    async def create(_admin: object, bindings: Iterable[AclBinding],
                     _timeout: float) -> dict[AclBinding, str | None]:
        return dict.fromkeys(bindings)

    async def delete(_admin: object, bindings: Iterable[AclBinding],
                     _timeout: float) -> dict[AclBinding, str | None]:
        found = list(bindings)
        deleted.extend(found)
        return dict.fromkeys(found)

    monkeypatch.setattr(flow_module, "create_acls", create)
    monkeypatch.setattr(flow_module, "delete_acls", delete)
    ours, theirs, new = acl("a.ours"), acl("a.theirs"), acl("a.new")
    records = Records(owned=[ours])
    plan = DriftPlan("a->b", 0, acls_add=(new,), acls_remove=(ours, theirs))
    entries = await sync(records).apply(plan, "configsync")
    assert deleted == [ours]
    assert records.owned == {new}
    assert {(e.kind, e.subject) for e in entries} == {("acl-add", str(new)),
                                                      ("acl-remove", str(ours))}


async def test_a_target_that_never_answers_createacls_is_recorded_not_owned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def hang(_admin: object, _bindings: Iterable[AclBinding],
                   _timeout: float) -> dict[AclBinding, str | None]:
        raise TimeoutError()

    monkeypatch.setattr(flow_module, "create_acls", hang)
    records = Records()
    entries = await sync(records).apply(DriftPlan("a->b", 0, acls_add=(acl("a.t"),)),
                                        "configsync")
    assert [(e.kind, e.ok) for e in entries] == [("acl-add", False)]
    assert records.owned == set()


async def test_a_value_refused_every_round_is_recorded_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(_admin: object, topics: Mapping[str, Sequence[ConfigOp]],
                     _timeout: float) -> dict[str, str | None]:
        return dict.fromkeys(topics, "POLICY_VIOLATION: no")

    monkeypatch.setattr(flow_module, "alter_topic_configs", refuse)
    records = Records()
    syncer = sync(records)
    plan = DriftPlan("a->b", 0, (config_drift("bad", "retention.ms", "1"),))
    for _ in range(3):
        await syncer.apply(plan, "configsync")
    assert len(records.history) == 1
    await syncer.apply(plan, "operator")  # an operator's attempt is always recorded
    assert len(records.history) == 2


async def test_topic_rounds_between_acl_rounds_do_not_apply_acls_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in cluster for the whole round (topics, capabilities, ACLs): Tansu cannot
    create ACLs, so a round that creates one cannot run against it."""
    created: list[AclBinding] = []

    async def create(_admin: object, bindings: Iterable[AclBinding],
                     _timeout: float) -> dict[AclBinding, str | None]:
        found = list(bindings)
        created.extend(found)
        return dict.fromkeys(found)

    async def describe(admin: Cluster, _timeout: float) -> list[AclBinding]:
        return admin.acls

    async def probe(admin: Cluster, _timeout: float) -> Capabilities:
        return Capabilities(admin.alias, dict.fromkeys(API_KEYS.values(), (0, 1)), True)

    monkeypatch.setattr(flow_module, "create_acls", create)
    monkeypatch.setattr(flow_module, "describe_acls", describe)
    monkeypatch.setattr(flow_module, "probe", probe)
    source = Cluster("a", [AclBinding("TOPIC", "t", "LITERAL", "User:x", "*", "READ",
                                      "ALLOW")])
    target = Cluster("b", [])
    flow = parse_config(CONFIG).flows["a->b"]
    records = Records()
    syncer = FlowSync(flow, source=source, target=target,  # type: ignore[arg-type]
                      records=records)  # type: ignore[arg-type]
    await syncer.round(acls=True)
    await syncer.round(acls=False)
    assert created == [acl("a.t")]
    assert [e.kind for e in records.history] == ["acl-add"]


class Cluster:
    def __init__(self, alias: str, acls: list[AclBinding]) -> None:
        self.alias = alias
        self.acls = acls

    async def topic_partitions(self, _names: object = None) -> dict[str, int]:
        return {}

    async def topic_configs(self, _topics: object) -> dict[str, object]:
        return {}
