"""Wire encoding of the requests the config-sync service sends that the local broker
cannot check: IncrementalAlterConfigs v0 byte for byte against Kafka's message layout,
and the ACL enum codes (Kafka's ResourceType, PatternType, AclOperation, AclPermissionType).
"""

from __future__ import annotations

import struct

from mirrorline.core.aclsync import AclBinding
from mirrorline.core.filters import ConfigOp
from mirrorline.kafka.syncadmin import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsRequest_v0,
    _args,
    _binding,
)


def string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(text)) + text.encode()


def test_incremental_alter_configs_v0_layout() -> None:
    request = IncrementalAlterConfigsRequest(
        {"orders": [ConfigOp("retention.ms", "set", "5"), ConfigOp("segment.ms", "delete", None)]})
    encoded = request.build(IncrementalAlterConfigsRequest_v0).encode()
    expected = (struct.pack(">i", 1) + struct.pack(">b", 2) + string("orders")
                + struct.pack(">i", 2)
                + string("retention.ms") + struct.pack(">b", 0) + string("5")
                + string("segment.ms") + struct.pack(">b", 1) + string(None)
                + struct.pack(">b", 0))  # validate_only = false
    assert encoded == expected


def test_acl_codes_match_kafkas_enums() -> None:
    binding = AclBinding("TOPIC", "orders", "PREFIXED", "User:a", "*", "ALL", "DENY")
    assert _args(binding) == (2, "orders", 4, "User:a", "*", 2, 2)
    group = AclBinding("GROUP", "g", "LITERAL", "User:a", "10.0.0.1", "READ", "ALLOW")
    assert _args(group) == (3, "g", 3, "User:a", "10.0.0.1", 3, 3)
    assert _binding(2, "orders", 4, ("User:a", "*", 2, 2)) == binding
    assert _binding(3, "g", 3, ("User:a", "10.0.0.1", 3, 3)) == group


def test_values_newer_than_this_code_are_never_copied() -> None:
    assert _binding(2, "orders", 3, ("User:a", "*", 99, 3)) is None
    assert _binding(42, "x", 3, ("User:a", "*", 3, 3)) is None
