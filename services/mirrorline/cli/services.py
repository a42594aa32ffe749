"""`mirrorline replicator` and `mirrorline run`: starting services from an MM2 properties file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from typing import Any

from mirrorline.core.config import load_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import MirrorSettings
from mirrorline.ports import GRPC_PORTS, METRICS_PORTS
from mirrorline.runtime import configure_logging, run_service

log = logging.getLogger(__name__)


def load_settings(path: str) -> MirrorSettings | None:
    """Load the config, printing errors and warnings; None means "exit with status 2"."""
    try:
        settings = load_config(path)
    except ConfigError as exc:
        print(f"mirrorline: configuration error: {exc}", file=sys.stderr)
        return None
    for warning in settings.warnings:
        print(f"mirrorline: warning: {path}: {warning}", file=sys.stderr)
    return settings


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="MM2 dedicated-mode properties file")
    parser.add_argument("--clusters", nargs="+", metavar="ALIAS",
                        help="only flows whose target is one of these aliases (as MM2)")
    parser.add_argument("--bind", default="127.0.0.1",
                        help="address for the gRPC and metrics listeners (default 127.0.0.1)")
    parser.add_argument("--log-level", default="INFO")


def register(subparsers: Any) -> None:
    rep = subparsers.add_parser("replicator", help="run a replicator process")
    _common(rep)
    rep.add_argument("--worker-id", default=None, help="name of this worker (default: random)")
    rep.add_argument("--grpc-port", type=int, default=GRPC_PORTS["replicator"])
    rep.add_argument("--metrics-port", type=int, default=METRICS_PORTS["replicator"],
                     help="Prometheus /metrics port (-1 disables)")
    rep.set_defaults(handler=_replicator)

    run = subparsers.add_parser("run", help="start this deployment's services as processes")
    _common(run)
    run.add_argument("--port-offset", type=int, default=0, metavar="N",
                     help="add N to every service's default gRPC and metrics port")
    run.set_defaults(handler=_run)


def _replicator(args: argparse.Namespace) -> int:
    configure_logging("replicator", args.log_level)
    settings = load_settings(args.config)
    if settings is None:
        return 2
    from mirrorline.replicator.service import ReplicatorService

    worker = args.worker_id or f"replicator-{uuid.uuid4().hex[:6]}"
    try:
        return run_service(lambda: ReplicatorService(
            settings, worker_id=worker, targets=args.clusters, grpc_host=args.bind,
            grpc_port=args.grpc_port, metrics_host=args.bind,
            metrics_port=None if args.metrics_port < 0 else args.metrics_port))
    except ConfigError as exc:
        print(f"mirrorline: configuration error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    configure_logging("run", args.log_level)
    settings = load_settings(args.config)
    if settings is None:
        return 2
    if not settings.enabled_flows(tuple(args.clusters) if args.clusters else None):
        print("mirrorline: configuration error: no enabled replication flow "
              "(set '<source>-><target>.enabled = true')", file=sys.stderr)
        return 2
    from mirrorline.supervisor import ChildSpec, Supervisor

    common = ["--config", args.config, "--bind", args.bind, "--log-level", args.log_level]
    if args.clusters:
        common += ["--clusters", *args.clusters]
    def ports(service: str) -> tuple[str, ...]:
        return ("--grpc-port", str(GRPC_PORTS[service] + args.port_offset),
                "--metrics-port", str(METRICS_PORTS[service] + args.port_offset))

    children = [ChildSpec("replicator", ("replicator", *common, *ports("replicator"),
                                         "--worker-id", "replicator-0"))]
    return asyncio.run(Supervisor(children).run())
