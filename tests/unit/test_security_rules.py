"""Security logic without I/O: roles, tokens, settings, request bounds, fencing, imports,
the audit trail's masking and the CLI's redirect rule."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import mirrorline.v1
from mirrorline.cli.admin_security import may_follow
from mirrorline.core import audit
from mirrorline.core.bounds import MAX_ID, MAX_STRING, oversized
from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.fencing import foreign_groups, scrape_refusal
from mirrorline.core.filters import GroupFilter, TopicFilter, should_replicate_topic
from mirrorline.core.flowdefs import MAX_IMPORT_FLOWS, flow_level_text, import_definitions
from mirrorline.core.policy import DefaultReplicationPolicy
from mirrorline.core.roles import (
    METHOD_ROLES,
    MUTATING,
    Role,
    allows,
    is_public,
    required_role,
)
from mirrorline.core.security import (
    GrpcSecurity,
    bind_problem,
    grpc_security,
    hash_token,
    new_token,
    parse_identities,
)
from mirrorline.grpcsecure import ClientCredentials
from mirrorline.v1 import admin_pb2, coordinator_pb2, flows_pb2


def _all_methods() -> set[str]:
    found: set[str] = set()
    for module in pkgutil.iter_modules(mirrorline.v1.__path__):
        if not module.name.endswith("_pb2"):
            continue
        descriptor = importlib.import_module(f"mirrorline.v1.{module.name}").DESCRIPTOR
        for service in descriptor.services_by_name.values():
            found.update(f"/{service.full_name}/{m.name}" for m in service.methods)
    return found


# -- roles ----------------------------------------------------------------------------------

def test_every_rpc_of_every_service_has_a_role() -> None:
    methods = _all_methods()
    assert "/mirrorline.v1.Admin/ListFlows" in methods  # the scan finds the protos
    missing = sorted(m for m in methods if m not in METHOD_ROLES)
    assert not missing, f"give these RPCs a role in mirrorline.core.roles: {missing}"
    stale = sorted(m for m in METHOD_ROLES if m not in methods)
    assert not stale, f"roles for RPCs that no longer exist: {stale}"


def test_the_roles_the_issue_names() -> None:
    admin = "/mirrorline.v1.Admin/"
    for rpc in ("GetStatus", "ListFlows", "TranslateOffsets", "PlanFailover", "PlanFailback"):
        assert required_role(admin + rpc) is Role.VIEWER, rpc
    for rpc in ("CreateFlow", "UpdateFlow", "PauseFlow", "ResumeFlow", "ExecuteFailover"):
        assert required_role(admin + rpc) is Role.OPERATOR, rpc
    for rpc in ("DeleteFlow", "ExecuteFailback"):
        assert required_role(admin + rpc) is Role.ADMIN, rpc
    for internal in ("/mirrorline.v1.Coordinator/Heartbeat", "/mirrorline.v1.Coordinator/Announce",
                     "/mirrorline.v1.Checkpointer/ExecuteFailover"):
        assert required_role(internal) is Role.SERVICE
    assert required_role("/mirrorline.v1.Admin/SomethingNew") is None  # refused: fail closed
    assert is_public("/grpc.health.v1.Health/Check")
    assert not is_public("/mirrorline.v1.Admin/ListFlows")


def test_every_mutating_call_is_an_admin_call_needing_at_least_operator() -> None:
    for method in MUTATING:
        assert method in METHOD_ROLES
        assert allows(Role.ADMIN, METHOD_ROLES[method])
        assert not allows(Role.VIEWER, METHOD_ROLES[method])


@pytest.mark.parametrize(("have", "need", "allowed"), [
    (Role.VIEWER, Role.VIEWER, True), (Role.VIEWER, Role.OPERATOR, False),
    (Role.OPERATOR, Role.VIEWER, True), (Role.OPERATOR, Role.ADMIN, False),
    (Role.ADMIN, Role.OPERATOR, True), (Role.ADMIN, Role.SERVICE, False),
    (Role.SERVICE, Role.SERVICE, True), (Role.SERVICE, Role.VIEWER, False),
])
def test_role_order_and_the_service_role_apart(have: Role, need: Role, allowed: bool) -> None:
    assert allows(have, need) is allowed


# -- tokens ---------------------------------------------------------------------------------

def test_tokens_are_verified_by_hash_and_certificates_by_name() -> None:
    alice, ci = new_token(), new_token()
    assert alice != ci and len(alice) >= 43
    identities = parse_identities(
        f"# people\nalice admin {hash_token(alice)}\nci viewer {hash_token(ci)}  # CI\n"
        "bob operator cert\n")
    found = identities.by_token(alice)
    assert found is not None and (found.name, found.role) == ("alice", Role.ADMIN)
    viewer = identities.by_token(ci + "\n")
    assert viewer is not None and viewer.role is Role.VIEWER
    assert identities.by_token("guess") is None
    assert identities.by_token(hash_token(alice)) is None  # the stored hash is no token
    bob = identities.by_certificate("bob")
    assert bob is not None and bob.role is Role.OPERATOR
    assert identities.by_certificate("alice") is None


@pytest.mark.parametrize(("text", "fragment"), [
    ("alice admin s3cret-token\n", "never the token itself"),
    ("alice root sha256:" + "0" * 64 + "\n", "unknown role 'root'"),
    ("alice admin\n", "NAME ROLE CREDENTIAL"),
    ("a viewer cert\na admin cert\n", "defined twice"),
    ("alice admin sha256:" + "A" * 64 + "\n", "lowercase hex"),
])
def test_bad_tokens_files_name_the_line(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_identities(text, source="tokens.txt")
    assert fragment in str(info.value)
    assert "tokens.txt:" in str(info.value)
    assert "s3cret-token" not in str(info.value)


# -- settings -------------------------------------------------------------------------------

def test_security_settings_are_read_from_the_properties() -> None:
    found = grpc_security({"mirrorline.grpc.tls.certificate": "s.pem",
                           "mirrorline.grpc.tls.key": "s.key", "mirrorline.grpc.tls.ca": "ca.pem",
                           "mirrorline.grpc.tls.client.auth.required": "true",
                           "mirrorline.admin.tokens.file": "tokens.txt"})
    assert found.tls and found.authenticates and found.client_auth_required
    assert not grpc_security({}).tls


@pytest.mark.parametrize(("raw", "key"), [
    ({"mirrorline.grpc.tls.certificate": "s.pem"}, "mirrorline.grpc.tls.key"),
    ({"mirrorline.grpc.tls.certificate": "s", "mirrorline.grpc.tls.key": "k"},
     "mirrorline.grpc.tls.ca"),
    ({"mirrorline.admin.tokens.file": "t"}, "mirrorline.admin.tokens.file"),
    ({"mirrorline.grpc.tls.client.auth.required": "true"},
     "mirrorline.grpc.tls.client.auth.required"),
    ({"mirrorline.grpc.insecure": "yes"}, "mirrorline.grpc.insecure"),
    ({"mirrorline.grpc.service.token.file": "s"}, "mirrorline.grpc.service.token.file"),
    ({"mirrorline.grpc.tls.certificate": "s", "mirrorline.grpc.tls.key": "k",
      "mirrorline.grpc.tls.ca": "c", "mirrorline.admin.tokens.file": "t"},
     "mirrorline.admin.tokens.file"),
])
def test_incomplete_security_settings_are_errors(raw: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        grpc_security(raw)
    assert info.value.key == key


def test_security_keys_are_known_to_the_config_loader() -> None:
    settings = parse_config(
        "clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
        "mirrorline.grpc.tls.ca = ca.pem\nmirrorline.admin.tokens.file = t\n")
    assert not settings.warnings


def test_only_loopback_may_serve_without_tls_and_authentication() -> None:
    plain = GrpcSecurity()
    tls = GrpcSecurity(certificate="c", key="k", ca="a")
    full = GrpcSecurity(certificate="c", key="k", ca="a", tokens_file="t")
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
        assert bind_problem(host, plain) is None, host
    assert "without TLS" in (bind_problem("0.0.0.0", plain) or "")
    assert "without authentication" in (bind_problem("10.0.0.5", tls) or "")
    assert bind_problem("0.0.0.0", full) is None
    assert bind_problem("0.0.0.0", GrpcSecurity(insecure=True)) is None


def test_the_cli_follows_redirects_only_where_it_can_verify_the_server() -> None:
    plaintext = ClientCredentials()
    verified = ClientCredentials(ca=b"ca")
    assert may_follow("127.0.0.1:7100", plaintext)
    assert may_follow("localhost:7100", plaintext)
    assert not may_follow("attacker.example:7100", plaintext)
    assert not may_follow("10.1.2.3:7100", plaintext)
    assert may_follow("controller-1.example:7100", verified)


def test_a_token_is_never_sent_without_tls() -> None:
    with pytest.raises(ConfigError, match="only sent over TLS"):
        ClientCredentials.from_files(token="abc")
    with pytest.raises(ConfigError, match="only used over TLS"):
        ClientCredentials.from_files(certificate="c.pem", key="c.key")


# -- request bounds -------------------------------------------------------------------------

def test_oversized_fields_are_named() -> None:
    assert oversized(admin_pb2.UpdateFlowRequest(name="a->b", set={"topics": "x.*"})) is None
    big = admin_pb2.UpdateFlowRequest(name="a->b", set={"topics": "a" * (MAX_STRING + 1)})
    assert (oversized(big) or "").startswith("set.topics: is 16385 characters long")
    nested = admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(
        source="a", target="b", properties={"topics.exclude": "b" * 3_500_000}))
    assert (oversized(nested) or "").startswith("spec.properties.topics.exclude:")
    worker = coordinator_pb2.WorkerHeartbeat(worker_id="w" * 1_500_000)
    assert (oversized(worker) or "").startswith(f"worker_id: is 1500000 characters long; "
                                                f"at most {MAX_ID}")
    many = admin_pb2.UpdateFlowRequest(name="a->b", unset=["k"] * 10_001)
    assert (oversized(many) or "").startswith("unset: more than")
    imported = admin_pb2.ImportFlowsRequest(properties="x" * 100_000)
    assert oversized(imported) is None  # a properties file may be long


def test_separator_and_cluster_count_are_bounded_in_the_file() -> None:
    base = "a.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
    with pytest.raises(ConfigError) as info:
        parse_config("clusters = a, b\n" + base + "replication.policy.separator = "
                     + "-" * 300 + "\n")
    assert info.value.key == "replication.policy.separator"
    many = ", ".join(f"c{i}" for i in range(3000))
    with pytest.raises(ConfigError) as info:
        parse_config(f"clusters = {many}\nbootstrap.servers = x:1\n")
    assert info.value.key == "clusters" and "at most 64" in info.value.message
    with pytest.raises(ConfigError) as info:
        parse_config("clusters = a, b\n" + base + "a->b.topics = " + "x" * 20_000 + "\n")
    assert info.value.key == "a->b.topics"


# -- imports --------------------------------------------------------------------------------

def test_the_cli_sends_only_flow_level_keys() -> None:
    text = ("clusters = a, b\na.bootstrap.servers = a:9092\nb.bootstrap.servers = b:9092\n"
            "a.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule "
            "required username=u password=hunter2;\nssl.key.password = hunter3\n"
            "topics = orders.*\na->b.enabled = true\na->b.offset.lag.max = 50\n"
            "a->b.producer.linger.ms = 5\nmirrorline.admin.tokens.file = /etc/t\n")
    sent, dropped = flow_level_text(text)
    assert "hunter" not in sent and "bootstrap" not in sent and "clusters" not in sent
    assert "a->b.enabled = true" in sent and "topics = orders.*" in sent
    assert "a->b.offset.lag.max = 50" in sent
    assert {"a.sasl.jaas.config", "ssl.key.password", "a->b.producer.linger.ms",
            "mirrorline.admin.tokens.file"} <= set(dropped)


def test_an_import_defines_flows_from_flow_keys_and_ignores_the_rest() -> None:
    definitions, warnings = import_definitions(
        "clusters = a, b\nb.bootstrap.servers = evil:1\ntopics = x.*\n"
        "a->b.enabled = true\na->b.offset.lag.max = 7\nb->a.enabled = false\n")
    assert list(definitions) == ["a->b"]
    assert dict(definitions["a->b"].properties) == {"topics": "x.*", "offset.lag.max": "7"}
    assert any(w.startswith("b.bootstrap.servers: ignored") for w in warnings)
    assert not any("evil" in w for w in warnings)


def test_an_import_with_too_many_flows_is_refused_before_building_any() -> None:
    text = "".join(f"c{i}->c{i + 1}.enabled = true\n" for i in range(3000))
    with pytest.raises(ConfigError, match=f"more than {MAX_IMPORT_FLOWS} flows"):
        import_definitions(text)


# -- fencing --------------------------------------------------------------------------------

def test_a_scrape_touches_only_the_flows_own_source_topics() -> None:
    policy = DefaultReplicationPolicy()
    flt = TopicFilter(["orders.*", ".*internal", "heartbeats", "backup\\..*"], [])

    def refusal(topic: str) -> str | None:
        return scrape_refusal(topic, topic_filter=flt, policy=policy, target_alias="backup")

    assert refusal("orders") is None and refusal("orders-eu") is None
    assert refusal("victim") == "outside the flow's topics filter"
    for internal in ("mirrorline.control.internal", "mm2-offsets.primary.internal",
                     "mm2-offset-syncs.backup.internal", "backup.checkpoints.internal",
                     "mirrorline-offset-map.primary.internal", "__consumer_offsets",
                     "mirrorline-d1.controller-lease.internal"):
        assert refusal(internal) == "an internal topic", internal
    assert refusal("heartbeats") == "a heartbeats topic"
    assert (refusal("backup.orders") or "").startswith("mirrored from backup")


def test_a_failover_touches_only_the_flows_groups() -> None:
    groups = GroupFilter(["billing.*"], ["billing-test"])
    assert foreign_groups(["billing", "billing-eu"], groups) == []
    assert foreign_groups(["billing", "payroll", "billing-test"], groups) == [
        "billing-test", "payroll"]


# -- audit ----------------------------------------------------------------------------------

def test_audit_arguments_mask_secrets() -> None:
    update = admin_pb2.UpdateFlowRequest(name="a->b", set={"topics": "x", "ssl.key.password": "p"},
                                         unset=["offset.lag.max"])
    args = audit.arguments(update)
    assert args["name"] == "a->b"
    assert "[hidden]" in args["set"] and '"p"' not in args["set"]
    assert audit.flow_of(update) == "a->b"
    imported = admin_pb2.ImportFlowsRequest(
        properties="topics = x\nsasl.jaas.config = secret stuff\nb.ssl.key.password: pw\n")
    masked = audit.arguments(imported)["properties"]
    assert "secret stuff" not in masked and "pw" not in masked and "topics = x" in masked
    create = admin_pb2.CreateFlowRequest(spec=flows_pb2.FlowSpec(source="a", target="b"))
    assert audit.flow_of(create) == "a->b"


def test_an_import_that_enables_no_flow_is_refused() -> None:
    with pytest.raises(ConfigError, match="no flow is enabled"):
        import_definitions("clusters = a, b\nb.bootstrap.servers = x:1\n", source="f")


def test_the_cli_reads_its_token_from_a_file_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from mirrorline.cli.admin_security import credentials

    directory = tmp_path
    (directory / "ca.pem").write_text("CA")
    (directory / "token").write_text("from-the-file\n")
    args = argparse.Namespace(ca=str(directory / "ca.pem"), cert=None, key=None,
                              token_file=str(directory / "token"), server_name=None)
    monkeypatch.setenv("MIRRORLINE_TOKEN", "from-the-environment")
    assert credentials(args).token == "from-the-file"
    args.token_file = None
    found = credentials(args)
    assert found.token == "from-the-environment" and found.ca == b"CA"
    monkeypatch.setenv("MIRRORLINE_CA", str(directory / "ca.pem"))
    args.ca = None
    assert credentials(args).tls


def test_faust_leader_topics_are_internal_for_every_flow_and_every_scrape() -> None:
    """faust's `<app>-__assignor-__leader` was mirrored by a `.*` flow and accepted by a
    scrape; its changelog and repartition topics stay ordinary (Kafka Streams names its
    own the same way, and MM2 mirrors them)."""
    policy = DefaultReplicationPolicy()
    everything = TopicFilter([".*"], [])
    leader = "mirrorline-heartbeat-backup-__assignor-__leader"
    assert policy.is_internal_topic(leader)
    assert not should_replicate_topic(
        leader, policy=policy, topic_filter=everything, target_alias="backup",
        heartbeats_replication_enabled=True, canary_enabled=True)
    assert scrape_refusal(leader, topic_filter=everything, policy=policy,
                          target_alias="backup") == "an internal topic"
    for ordinary in ("orders-app-counts-changelog", "orders-app-by-user-repartition"):
        assert should_replicate_topic(
            ordinary, policy=policy, topic_filter=everything, target_alias="backup",
            heartbeats_replication_enabled=True, canary_enabled=True)
