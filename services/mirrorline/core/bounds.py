"""Bounds on what one request may carry, checked before any handler does work.

gRPC already refuses a message above `MAX_MESSAGE_BYTES`; inside that, no string field
may be longer than the largest sane value (a topic pattern list, a flow property), no
list or map may hold more entries than a person could mean. A request over a bound gets
INVALID_ARGUMENT naming the field at once -- before a pattern is compiled or anything is
written to the control log -- instead of costing the service seconds or gigabytes.
"""

from __future__ import annotations

from typing import Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

#: Longest string field (a property value such as a `topics` pattern list).
MAX_STRING: Final = 16_384
#: Longest identifier-like field (worker ids, instance ids, addresses).
MAX_ID: Final = 256
#: Most entries of a repeated or map field.
MAX_ENTRIES: Final = 10_000
#: Most consumer groups one failover call (plan, execute, to a time) covers: the work of
#: a call grows with its groups, and a bigger failover is several calls.
MAX_FAILOVER_GROUPS: Final = 1_000
#: Fields allowed to be longer: full field name -> bound.
LONGER: Final = {
    "mirrorline.v1.ImportFlowsRequest.properties": 1_048_576,
}
#: Fields held to MAX_ID.
SHORT: Final = frozenset({
    "mirrorline.v1.WorkerHeartbeat.worker_id", "mirrorline.v1.WorkerHeartbeat.address",
    "mirrorline.v1.ServiceAnnouncement.service",
    "mirrorline.v1.ServiceAnnouncement.instance_id",
    "mirrorline.v1.ServiceAnnouncement.address",
    "mirrorline.v1.FlowRequest.name",
})


def _bound(field: FieldDescriptor) -> int:
    if field.full_name in SHORT:
        return MAX_ID
    return LONGER.get(field.full_name, MAX_STRING)


def oversized(message: Message, prefix: str = "") -> str | None:
    """The first field over its bound, as `field: reason`, or None."""
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        is_map = (field.message_type is not None
                  and field.message_type.GetOptions().map_entry)
        if is_map:
            if len(value) > MAX_ENTRIES:
                return f"{path}: more than {MAX_ENTRIES} entries"
            value_field = field.message_type.fields_by_name["value"]  # type: ignore[union-attr]
            for key, item in value.items():
                if isinstance(key, str) and len(key) > MAX_ID:
                    return f"{path}: a key is longer than {MAX_ID} characters"
                if isinstance(item, str) and len(item) > _bound(value_field):
                    return (f"{path}.{key}: is {len(item)} characters long; at most "
                            f"{_bound(value_field)}")
                if isinstance(item, Message):
                    found = oversized(item, f"{path}.{key}.")
                    if found:
                        return found
            continue
        single = isinstance(value, (str, bytes, int, float, Message))
        items = [value] if single else list(value)
        if len(items) > MAX_ENTRIES:
            return f"{path}: more than {MAX_ENTRIES} entries"
        for item in items:
            if isinstance(item, str) and len(item) > _bound(field):
                return f"{path}: is {len(item)} characters long; at most {_bound(field)}"
            if isinstance(item, Message):
                found = oversized(item, f"{path}.")
                if found:
                    return found
    return None
