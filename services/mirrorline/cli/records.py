"""`mirrorline dev produce|consume`: numbered records for drills (see mirrorline.dev.records)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError

from mirrorline.dev.records import consume, produce
from mirrorline.kafka.causes import quiet_aiokafka, unreachable

#: What a cluster that does not answer raises: said in one line, not with a traceback.
_UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, TimeoutError,
                ConnectionError)


def register(dev_sub: Any) -> None:
    p = dev_sub.add_parser("produce", help="write numbered records to a topic")
    p.add_argument("bootstrap", help="HOST:PORT of the cluster")
    p.add_argument("topic")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--start", type=int, default=0, help="first number (default 0)")
    p.add_argument("--partitions", type=int, default=3,
                   help="partitions when the topic is created (default 3)")
    p.set_defaults(handler=_produce)

    c = dev_sub.add_parser("consume", help="read as a consumer group, commit, report")
    c.add_argument("bootstrap", help="HOST:PORT of the cluster")
    c.add_argument("topics", nargs="+")
    c.add_argument("--group", required=True)
    c.add_argument("--max", type=int, default=None, dest="limit",
                   help="stop after this many records (default: until quiet)")
    c.set_defaults(handler=_consume)


def _produce(args: argparse.Namespace) -> int:
    if args.count < 0 or args.partitions < 1:
        print("mirrorline: --count must be >= 0 and --partitions >= 1", file=sys.stderr)
        return 2
    # The client's retries are not news (Apache Kafka answers NOT_LEADER_OR_FOLLOWER to a
    # produce right after it created the topic, until the leader has taken over); an
    # error that ends the run is reported whole.
    quiet_aiokafka()
    try:
        sent = asyncio.run(produce(args.bootstrap, args.topic, args.count,
                                   partitions=args.partitions, start=args.start))
    except _UNREACHABLE as exc:
        print(f"mirrorline: {unreachable(None, exc, args.bootstrap)}", file=sys.stderr)
        return 1
    print(f"produced {sent} records to {args.topic}")
    return 0


def _consume(args: argparse.Namespace) -> int:
    quiet_aiokafka()
    try:
        got = asyncio.run(consume(args.bootstrap, args.topics, args.group, limit=args.limit))
    except _UNREACHABLE as exc:
        print(f"mirrorline: {unreachable(None, exc, args.bootstrap)}", file=sys.stderr)
        return 1
    numbers = sorted(int(v.rsplit("-", 1)[1]) for v in got.values
                     if v.rsplit("-", 1)[-1].isdigit())
    span = f", numbers {numbers[0]}..{numbers[-1]}" if numbers else ""
    print(f"read {len(got.values)} records ({got.distinct} distinct{span}) as group "
          f"{args.group}; committed")
    return 0
