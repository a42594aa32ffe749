"""`mirrorline admin partitions offload|reclaim FLOW TOPIC [--partition N]`: an operator's
word on whether partitions run on the Spark executor or the replicator workers."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mirrorline.cli.admin_args import parse_flow_name
from mirrorline.v1 import spark_pb2

#: (args, stub method getter, request, render) -> exit status; admin.py's `_unary`.
Unary = Callable[..., int]


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a partition number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a partition number is >= 0, not {value}")
    return value


def render(response: spark_pb2.PlacePartitionsResponse) -> str:
    which = ("every partition" if response.partition < 0
             else f"partition {response.partition}")
    where = "the Spark executor" if response.executor == "spark" else "the replicator workers"
    return (f"{response.flow}: {which} of {response.topic} now runs on {where} (control-log "
            f"offset {response.control_offset}); the hand-over is fenced and takes a few "
            "seconds -- watch `mirrorline admin status`")


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser], unary: Unary) -> None:
    def handler(offload: bool) -> Callable[[argparse.Namespace], int]:
        def run(args: argparse.Namespace) -> int:
            request = spark_pb2.PlacePartitionsRequest(flow=args.flow, topic=args.topic)
            if args.partition is not None:
                request.partition = args.partition
            return unary(args, (lambda stub: stub.OffloadPartitions) if offload
                         else (lambda stub: stub.ReclaimPartitions), request, render)
        return run

    for name, offload, text in (
            ("offload", True, "run partitions on the Spark executor (needs one alive)"),
            ("reclaim", False, "run partitions on the replicator workers again")):
        parser = leaf(sub, name, handler(offload), text)
        parser.add_argument("flow", type=parse_flow_name, metavar="FLOW",
                            help="the flow, SOURCE->TARGET")
        parser.add_argument("topic", metavar="TOPIC", help="source topic")
        parser.add_argument("--partition", type=_non_negative, metavar="N",
                            help="only this partition (default: every partition of TOPIC)")
