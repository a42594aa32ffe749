"""`mirrorline dev kafka install|path`: the Apache Kafka jars behind `--broker kafka`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mirrorline.dev.brokers import BrokerError
from mirrorline.dev.kafka import KAFKA_VERSION, install, installed, java_binary, lib_dir


def register(dev_sub: Any) -> None:
    kafka = dev_sub.add_parser(
        "kafka", help=f"the Apache Kafka {KAFKA_VERSION} jars (brokers, tools, MirrorMaker 2)")
    kafka_sub = kafka.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)
    inst = kafka_sub.add_parser(
        "install", help="fetch the pinned Apache Kafka jars from Maven Central (needs Maven)",
        description=f"Copy Apache Kafka {KAFKA_VERSION}'s broker, tools and MirrorMaker 2 "
                    "jars with their log4j2 binding into one folder ($MIRRORLINE_KAFKA_HOME, "
                    "else ~/.cache/mirrorline/kafka-VERSION). Does nothing when present.")
    inst.add_argument("--verbose", action="store_true", help="show Maven's output")
    inst.set_defaults(handler=_install)
    path = kafka_sub.add_parser("path", help="print the jar folder (exit 1 if not installed)")
    path.set_defaults(handler=_path)


def _install(args: argparse.Namespace) -> int:
    try:
        folder = install(quiet=not args.verbose)
    except BrokerError as exc:
        print(f"mirrorline: dev kafka install: {exc}", file=sys.stderr)
        return 1
    java = java_binary() or "no java found: brokers need Java 17+"
    print(f"Apache Kafka {KAFKA_VERSION} in {folder} ({java})")
    return 0


def _path(args: argparse.Namespace) -> int:
    print(lib_dir())
    return 0 if installed() else 1
