"""What a cluster can do for the config-sync service, asked before anything is called.

Brokers differ: Tansu 0.6 has no CreatePartitions or DeleteAcls and lists CreateAcls but
never answers it; a Kafka cluster without an authorizer refuses every ACL request with
SECURITY_DISABLED. Calling a request a broker cannot serve hangs or kills a client, so
the ApiVersions answer is checked first, and a missing feature becomes one sentence
("unavailable on backup: ...") shown in status and drift plans instead of a retry storm.

ACL support counts only when DescribeAcls, CreateAcls and DeleteAcls are all listed:
every Kafka broker with ACLs implements the three together, and a broker listing only
some of them (Tansu) has a partial implementation that cannot be trusted with CreateAcls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from aiokafka.protocol.admin import ApiVersionRequest, DescribeAclsRequest

from mirrorline.kafka.admin import ClusterAdmin, error_text

API_KEYS: Final[Mapping[str, int]] = {
    "DescribeAcls": 29,
    "CreateAcls": 30,
    "DeleteAcls": 31,
    "CreatePartitions": 37,
    "IncrementalAlterConfigs": 44,
}
ACL_APIS: Final = ("DescribeAcls", "CreateAcls", "DeleteAcls")
SECURITY_DISABLED: Final = 54
#: DescribeAcls filter values: resource ANY, pattern ANY, operation ANY, permission ANY.
_ANY: Final = 1


@dataclass
class Capabilities:
    alias: str
    apis: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: None: not asked yet (ACL APIs missing); else whether an authorizer answered.
    authorizer: bool | None = None
    authorizer_problem: str = ""

    def has(self, api: str) -> bool:
        return API_KEYS[api] in self.apis

    def missing(self, *apis: str) -> list[str]:
        return [api for api in apis if not self.has(api)]

    def unavailable(self, *apis: str) -> str | None:
        """"unavailable on <alias>: <why>" when one of `apis` is missing, else None."""
        gone = self.missing(*apis)
        if gone:
            return (f"unavailable on {self.alias}: the broker does not implement "
                    f"{', '.join(gone)} (ApiVersions)")
        return None

    def acls_unavailable(self, *, write: bool) -> str | None:
        """Why ACLs cannot be read (or, with `write`, changed) on this cluster."""
        gone = self.missing(*ACL_APIS) if write else self.missing("DescribeAcls")
        if gone:
            return (f"unavailable on {self.alias}: the broker does not implement "
                    f"{', '.join(gone)} (ApiVersions), so it has no usable ACL support")
        if self.authorizer is False:
            return f"unavailable on {self.alias}: {self.authorizer_problem}"
        return None


async def probe(admin: ClusterAdmin, timeout: float) -> Capabilities:
    """Ask ApiVersions, then (if DescribeAcls exists) whether an authorizer is configured."""
    caps = Capabilities(admin.alias)
    response = await asyncio.wait_for(
        admin.client._send_request(ApiVersionRequest()), timeout)
    caps.apis = {key: (low, high) for key, low, high in response.api_versions}
    if caps.has("DescribeAcls"):
        reply = await asyncio.wait_for(admin.client._send_request(DescribeAclsRequest(
            2, None, _ANY, None, None, _ANY, _ANY)), timeout)
        if reply.error_code == SECURITY_DISABLED:
            caps.authorizer = False
            caps.authorizer_problem = "no authorizer is configured (SECURITY_DISABLED)"
        elif reply.error_code != 0:
            caps.authorizer = False
            caps.authorizer_problem = ("cannot describe ACLs: "
                                       + error_text(reply.error_code, reply.error_message))
        else:
            caps.authorizer = True
    return caps
