"""`mirrorline dev demo`: see Mirrorline mirror sample data between two local clusters."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import Any

from mirrorline.dev.brokers import default_state_dir


def register(dev_subparsers: Any) -> None:
    demo = dev_subparsers.add_parser(
        "demo", help="start two local clusters, mirror sample data, show it converge, stop")
    demo.add_argument("--workdir", type=Path, default=None,
                      help="where the config and logs go (default: <state dir>/demo)")
    demo.add_argument("--timeout", type=float, default=180.0,
                      help="give up if the copy has not converged after this many seconds")
    demo.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                      help="tansu: the embedded broker, pip only (default); kafka: Apache "
                           "Kafka (needs Java 17+ and 'mirrorline dev kafka install')")
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from mirrorline.dev.demo import run_demo

    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or default_state_dir() / "demo"
    try:
        return asyncio.run(run_demo(workdir, timeout=args.timeout, broker=args.broker))
    except KeyboardInterrupt:
        return 130
