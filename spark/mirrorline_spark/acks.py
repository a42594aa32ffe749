"""How a micro-batch's acknowledgements reach the executor that records them.

Spark calls the sink's `commit` on the driver, in a Python worker process of its own,
after every writer task of the micro-batch succeeded (each waited for acks=all). That
process sends what landed where to the executor service over a Unix socket (the driver
always runs beside the service, whatever the master), and the service feeds it to the
same bookkeeping as the replicator. The commit fails -- and so the micro-batch and the
query -- when the service refuses it, e.g. because a partition's record was rejected.

Frames: 4-byte big-endian length, then UTF-8 JSON. Request `{"batch": N, "secret": S,
"acks": [...]}`, reply `{"ok": true}` or `{"error": "..."}`. `S` is the random secret the
executor gave the query it started (sink option `ackSecret`): the executor refuses a
message without the running query's secret, or with acknowledgements of partitions that
query does not copy, and records nothing of it.
"""

from __future__ import annotations

import json
import socket
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

_LENGTH = struct.Struct(">I")


@dataclass
class PartitionAcks:
    """What one writer task got acknowledged for one source partition."""

    topic: str
    partition: int
    remote_topic: str
    #: (upstream_start, count, downstream_start), in order (mirrorline.core.acked_runs).
    runs: list[tuple[int, int, int]] = field(default_factory=list)
    #: The target refused a record: names topic, partition and offset; runs hold what
    #: was acknowledged before it.
    error: str | None = None
    value_bytes: int = 0
    #: Record timestamps (ms) of the acknowledged records: min, max and the last one.
    min_timestamp: int = -1
    max_timestamp: int = -1
    last_timestamp: int = -1
    #: When the writer task first saw this partition's records (ms since the epoch): the
    #: reference of MM2's record age (the replicator measures it at fetch).
    fetched_ms: float = -1.0
    #: The flow the partition is copied for (a query may copy several).
    flow: str = ""
    #: The copy path of the partition's last chunk ("batches" or "records") and why, as
    #: the replicator's status says it (`PartitionStatus.copy_path`, `copy_path_reason`).
    copy_path: str = ""
    copy_path_reason: str = ""

    @property
    def records(self) -> int:
        return sum(count for _, count, _ in self.runs)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PartitionAcks:
        doc = dict(doc)
        doc["runs"] = [tuple(r) for r in doc.get("runs", [])]
        return cls(**doc)


def encode(doc: dict[str, Any]) -> bytes:
    body = json.dumps(doc, separators=(",", ":")).encode()
    return _LENGTH.pack(len(body)) + body


def decode_length(header: bytes) -> int:
    (length,) = _LENGTH.unpack(header)
    return int(length)


def send_acks(path: str, batch_id: int, acks: list[PartitionAcks], *,
              secret: str | None = None, timeout: float = 120.0) -> None:
    """Hand one micro-batch's acknowledgements to the executor; raise if it refuses."""
    doc: dict[str, Any] = {"batch": batch_id, "acks": [asdict(a) for a in acks]}
    if secret is not None:
        doc["secret"] = secret
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(encode(doc))
        header = _recv_exactly(sock, _LENGTH.size)
        reply = json.loads(_recv_exactly(sock, decode_length(header)))
    if not reply.get("ok"):
        raise RuntimeError(f"mirrorline executor refused micro-batch {batch_id}: "
                           f"{reply.get('error', 'no reason given')}")


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            raise ConnectionError("mirrorline executor closed the acknowledgement socket")
        chunks.extend(chunk)
    return bytes(chunks)
