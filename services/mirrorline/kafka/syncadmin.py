"""ACL and incremental-config requests for the config-sync service, over aiokafka.

aiokafka 0.14 has protocol structs for the ACL requests but no admin methods for them, and
nothing for IncrementalAlterConfigs; this module sends them on the admin client's
connections. Callers check `mirrorline.kafka.capabilities` first: these functions assume
the broker implements the request. Each call is bounded by a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

from mirrorline.core.aclsync import AclBinding
from mirrorline.core.filters import ConfigOp
from mirrorline.kafka.admin import ClusterAdmin, error_text

RESOURCE_TYPES: Final = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID",
                         6: "DELEGATION_TOKEN", 7: "USER"}
PATTERN_TYPES: Final = {3: "LITERAL", 4: "PREFIXED"}
OPERATIONS: Final = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER",
                     8: "DESCRIBE", 9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS",
                     11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS",
                     14: "DESCRIBE_TOKENS"}
PERMISSIONS: Final = {2: "DENY", 3: "ALLOW"}
_ANY: Final = 1
_TOPIC: Final = 2


def _code(table: Mapping[int, str], name: str) -> int:
    for code, known in table.items():
        if known == name:
            return code
    raise ValueError(f"unknown ACL value {name!r}")


class IncrementalAlterConfigsResponse_v0(Response):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("responses", Array(("error_code", Int16), ("error_message", String("utf-8")),
                            ("resource_type", Int8), ("resource_name", String("utf-8")))),
    )


class IncrementalAlterConfigsRequest_v0(RequestStruct):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = IncrementalAlterConfigsResponse_v0
    SCHEMA = Schema(
        ("resources", Array(
            ("resource_type", Int8), ("resource_name", String("utf-8")),
            ("configs", Array(("name", String("utf-8")), ("config_operation", Int8),
                              ("value", String("utf-8")))))),
        ("validate_only", Boolean),
    )


class IncrementalAlterConfigsRequest(
        Request[IncrementalAlterConfigsRequest_v0]):  # type: ignore[misc]
    """Version 0 only: the last version without flexible encoding (Kafka 2.3 and later)."""

    API_KEY = 44

    def __init__(self, topics: Mapping[str, Sequence[ConfigOp]]) -> None:
        self._topics = topics

    def build(self, request_struct_class: type[IncrementalAlterConfigsRequest_v0]
              ) -> IncrementalAlterConfigsRequest_v0:
        resources = [
            (_TOPIC, topic, [(op.name, 0 if op.op == "set" else 1, op.value) for op in ops])
            for topic, ops in self._topics.items()
        ]
        return request_struct_class(resources, False)


async def alter_topic_configs(admin: ClusterAdmin, topics: Mapping[str, Sequence[ConfigOp]],
                              timeout: float) -> dict[str, str | None]:
    """Apply incremental config changes; topic -> error text (None: applied)."""
    wanted = {t: ops for t, ops in topics.items() if ops}
    if not wanted:
        return {}
    response = await asyncio.wait_for(
        admin.client._send_request(IncrementalAlterConfigsRequest(wanted)), timeout)
    out: dict[str, str | None] = dict.fromkeys(wanted)
    for code, message, _rtype, name in response.responses:
        out[name] = None if code == 0 else error_text(code, message)
    return out


def _binding(rtype: int, name: str, pattern: int, acl: Sequence[object]) -> AclBinding | None:
    principal, host, operation, permission = acl
    try:
        return AclBinding(RESOURCE_TYPES[rtype], name, PATTERN_TYPES[pattern], str(principal),
                          str(host), OPERATIONS[int(operation)],  # type: ignore[call-overload]
                          PERMISSIONS[int(permission)])  # type: ignore[call-overload]
    except KeyError:
        return None  # a value newer than this code knows: never copied


async def describe_acls(admin: ClusterAdmin, timeout: float) -> list[AclBinding]:
    """Every ACL of the cluster (any resource, pattern, principal, operation)."""
    reply = await asyncio.wait_for(admin.client._send_request(DescribeAclsRequest(
        _ANY, None, _ANY, None, None, _ANY, _ANY)), timeout)
    if reply.error_code != 0:
        raise RuntimeError(f"cannot describe ACLs on {admin.alias!r}: "
                           f"{error_text(reply.error_code, reply.error_message)}")
    out: list[AclBinding] = []
    for resource in reply.resources:
        if len(resource) == 4:  # v1: type, name, pattern type, acls
            rtype, name, pattern, acls = resource
        else:  # v0: literal patterns only
            rtype, name, acls = resource
            pattern = 3
        for acl in acls:
            binding = _binding(rtype, name, pattern, acl)
            if binding is not None:
                out.append(binding)
    return out


def _args(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (_code(RESOURCE_TYPES, b.resource_type), b.name, _code(PATTERN_TYPES, b.pattern),
            b.principal, b.host, _code(OPERATIONS, b.operation),
            _code(PERMISSIONS, b.permission))


async def create_acls(admin: ClusterAdmin, bindings: Iterable[AclBinding],
                      timeout: float) -> dict[AclBinding, str | None]:
    """Create each ACL; binding -> error text (None: created)."""
    out: dict[AclBinding, str | None] = {}
    for binding in bindings:
        reply = await asyncio.wait_for(
            admin.client._send_request(CreateAclsRequest(*_args(binding))), timeout)
        code, message = reply.creation_responses[0]
        out[binding] = None if code == 0 else error_text(code, message)
    return out


async def delete_acls(admin: ClusterAdmin, bindings: Iterable[AclBinding],
                      timeout: float) -> dict[AclBinding, str | None]:
    """Delete exactly these ACLs (each filter matches one binding exactly)."""
    out: dict[AclBinding, str | None] = {}
    for binding in bindings:
        reply = await asyncio.wait_for(
            admin.client._send_request(DeleteAclsRequest(*_args(binding))), timeout)
        code, message = reply.filter_responses[0][0], reply.filter_responses[0][1]
        out[binding] = None if code == 0 else error_text(code, message)
    return out
