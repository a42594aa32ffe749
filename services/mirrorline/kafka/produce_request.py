"""Produce requests encoded with one copy of their record batches instead of six.

aiokafka encodes a request by nesting: each `Bytes` field prefixes its length
(`length + value`, a copy), and each `Schema` and `Array` joins its encoded children (a
copy per level). A produce request's batches sit four levels deep, so every batch byte is
copied six times before the connection adds the header and the size (two more). On the
batch path, where nothing else touches a record, those copies were about a third of the
replicator's CPU at 1 KiB records (a py-spy profile of `python -m bench --size 1024`).

`FlatProduceRequest` builds aiokafka's own request structs (so version choice, response
parsing and everything else stay aiokafka's) whose `encode` walks the same schema but
collects the pieces, batches untouched, and joins them once. The bytes are the same,
field for field (`tests/unit/test_produce_request.py` compares them with aiokafka's for
every version). Our connection (`kafka/connio.py`) takes the pieces themselves
(`encode_pieces`) and joins them once with the request's size and header. Services
install it for every producer of the process at start (`encode_produce_requests_flat`,
called by `mirrorline.runtime`), as they forbid topic auto-creation
(`kafka/autocreate.py`).
"""

from __future__ import annotations

from typing import Any

import aiokafka.producer.sender
from aiokafka.protocol.api import RequestStruct
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.types import Array, Bytes, Int32, Schema

__all__ = ["BatchParts", "FlatProduceRequest", "encode_flat", "encode_pieces",
           "encode_produce_requests_flat"]


class BatchParts:
    """A record batch in pieces -- a rewritten header and the source's records section
    (`core.batches.rewrite_header`) -- that a flat produce request carries as its one
    `Bytes` value, copying each piece once into the request instead of joining them
    first. Only flat requests take it (`produce_requests_flat`)."""

    __slots__ = ("parts", "size")

    def __init__(self, *parts: bytes | bytearray | memoryview) -> None:
        self.parts = parts
        self.size = sum(map(len, parts))

    def __len__(self) -> int:
        return self.size


def _collect(kind: Any, value: Any, out: list[Any]) -> None:
    if isinstance(kind, Schema):
        for field, item in zip(kind.fields, value, strict=True):
            _collect(field, item, out)
    elif isinstance(kind, Array):
        if value is None:
            out.append(Int32.encode(-1))
            return
        out.append(Int32.encode(len(value)))
        for item in value:
            _collect(kind.array_of, item, out)
    elif kind is Bytes and value is not None:
        out.append(Int32.encode(len(value)))
        if type(value) is BatchParts:
            out.extend(value.parts)
        else:
            out.append(value)
    else:
        out.append(kind.encode(value))


def encode_pieces(struct: RequestStruct, out: list[Any]) -> None:
    """Append the pieces of `struct.encode()` to `out`, batches as they are (not copied)."""
    _collect(struct.SCHEMA, [struct.__dict__[name] for name in struct.SCHEMA.names], out)


def encode_flat(struct: RequestStruct) -> bytes:
    """`struct.encode()`, with one copy of every byte."""
    out: list[Any] = []
    encode_pieces(struct, out)
    return b"".join(out)


_FLAT: dict[type[RequestStruct], type[RequestStruct]] = {}


def _flat(struct_class: type[RequestStruct]) -> type[RequestStruct]:
    """`struct_class` encoding itself with `encode_flat`."""
    flat = _FLAT.get(struct_class)
    if flat is None:
        flat = _FLAT[struct_class] = type(struct_class.__name__, (struct_class,),
                                          {"encode": encode_flat,
                                           "encode_pieces": encode_pieces})
    return flat


class FlatProduceRequest(ProduceRequest):  # type: ignore[misc]
    """aiokafka's `ProduceRequest`, built into structs that encode with one copy."""

    @classmethod
    def of(cls, request: ProduceRequest) -> FlatProduceRequest:
        """The same request, encoded flat."""
        return cls(request._transactional_id, request._required_acks, request._timeout,
                   request._topics)

    def build(self, request_struct_class: type[Any]) -> Any:
        return super().build(_flat(request_struct_class))


def encode_produce_requests_flat() -> None:
    """From now on every aiokafka producer of this process encodes its requests flat."""
    module: Any = aiokafka.producer.sender
    module.ProduceRequest = FlatProduceRequest


def produce_requests_flat() -> bool:
    module: Any = aiokafka.producer.sender
    return module.ProduceRequest is FlatProduceRequest
