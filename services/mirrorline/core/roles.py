"""Who may call what: the role each gRPC method needs.

Roles are ordered for people -- `viewer` < `operator` < `admin` -- and `service` stands
apart: it is the deployment's own identity (workers heartbeating, the checkpointer
announcing itself, the controller asking workers, the checkpointer and the heartbeat
service), and no person's
role includes it, nor does it include theirs. A method missing from the table is refused
(fail closed); a unit test checks that every method of every proto service has a role,
so an RPC added later cannot be forgotten.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final


class Role(enum.Enum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"
    SERVICE = "service"


_RANK: Final = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def allows(have: Role, need: Role) -> bool:
    """Whether an identity with role `have` may call a method needing `need`."""
    if need is Role.SERVICE or have is Role.SERVICE:
        return have is need
    return _RANK[have] >= _RANK[need]


_ADMIN = "/mirrorline.v1.Admin/"
_V, _O, _A, _S = Role.VIEWER, Role.OPERATOR, Role.ADMIN, Role.SERVICE

#: Full gRPC method name -> the role it needs.
METHOD_ROLES: Final[Mapping[str, Role]] = MappingProxyType({
    # The public Admin API.
    _ADMIN + "ListFlows": _V,
    _ADMIN + "GetFlow": _V,
    _ADMIN + "GetStatus": _V,
    _ADMIN + "WatchStatus": _V,
    _ADMIN + "ListWorkers": _V,
    _ADMIN + "TranslateOffsets": _V,
    _ADMIN + "PlanFailover": _V,
    _ADMIN + "PlanFailback": _V,
    _ADMIN + "Topology": _V,
    _ADMIN + "Canary": _V,
    _ADMIN + "Audit": _V,
    _ADMIN + "GetDrift": _V,
    _ADMIN + "GetDriftHistory": _V,
    _ADMIN + "CreateFlow": _O,
    _ADMIN + "UpdateFlow": _O,
    _ADMIN + "PauseFlow": _O,
    _ADMIN + "ResumeFlow": _O,
    _ADMIN + "ImportFlows": _O,
    _ADMIN + "ExecuteFailover": _O,
    _ADMIN + "FailoverToTime": _O,
    _ADMIN + "History": _O,
    # Changes topic configs, partitions and ACLs on the target, as a sync round would.
    _ADMIN + "ApplyDrift": _O,
    # Where partitions run (issue 8): an operator's decision, like pausing a flow.
    _ADMIN + "OffloadPartitions": _O,
    _ADMIN + "ReclaimPartitions": _O,
    _ADMIN + "DeleteFlow": _A,
    # Scrape (inside ExecuteFailback) deletes data; failing back is the admin's decision.
    _ADMIN + "ExecuteFailback": _A,
    # Internal: only the deployment's own services.
    "/mirrorline.v1.Coordinator/Heartbeat": _S,
    "/mirrorline.v1.Coordinator/Announce": _S,
    "/mirrorline.v1.Checkpointer/TranslateOffsets": _S,
    "/mirrorline.v1.Checkpointer/PlanFailover": _S,
    "/mirrorline.v1.Checkpointer/ExecuteFailover": _S,
    "/mirrorline.v1.Checkpointer/FailoverToTime": _S,
    "/mirrorline.v1.Replicator/GetStatus": _S,
    "/mirrorline.v1.Heartbeat/Topology": _S,
    "/mirrorline.v1.Heartbeat/Canary": _S,
    "/mirrorline.v1.Heartbeat/Audit": _S,
    "/mirrorline.v1.ConfigSync/GetDrift": _S,
    "/mirrorline.v1.ConfigSync/ApplyDrift": _S,
    "/mirrorline.v1.ConfigSync/GetDriftHistory": _S,
    "/mirrorline.v1.ConfigSync/GetSyncStatus": _S,
})

#: Admin methods that change state: each call is recorded in the audit trail.
MUTATING: Final = frozenset({
    _ADMIN + m for m in ("CreateFlow", "UpdateFlow", "PauseFlow", "ResumeFlow", "DeleteFlow",
                         "ImportFlows", "ExecuteFailover", "FailoverToTime", "ExecuteFailback",
                         "ApplyDrift", "OffloadPartitions", "ReclaimPartitions")
})

#: Open to every caller, authenticated or not: probes must work without credentials.
PUBLIC_PREFIXES: Final = ("/grpc.health.v1.Health/",)
#: Reflection describes the published protos; any authenticated caller may use it.
REFLECTION_PREFIXES: Final = ("/grpc.reflection.",)


def required_role(method: str) -> Role | None:
    """The role `method` needs; None when it is not in the table (refuse it)."""
    found = METHOD_ROLES.get(method)
    if found is None and method.startswith(REFLECTION_PREFIXES):
        return Role.VIEWER
    return found


def is_public(method: str) -> bool:
    return method.startswith(PUBLIC_PREFIXES)
