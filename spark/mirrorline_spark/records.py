"""The rows the source produces and the sink consumes: one Kafka record each, exactly.

Timestamps stay integers (milliseconds since the epoch, as on the wire) rather than
Spark timestamps, which are microseconds and would invite rounding; null keys and values
stay null; headers keep their order and duplicates as a list of (key, value) structs.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_DDL = ("topic string, partition int, offset long, key binary, value binary, "
              "timestamp long, headers array<struct<key:string,value:binary>>")

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

ARROW_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("timestamp", pa.int64()),
    pa.field("headers", pa.list_(HEADER)),
])
