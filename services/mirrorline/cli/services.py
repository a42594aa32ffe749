"""`mirrorline replicator|controller|checkpointer|heartbeat|configsync|run`: starting
services from an MM2 properties file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mirrorline import grpcsecure, logsecrets
from mirrorline.configfile import load_config
from mirrorline.core.errors import ConfigError, ListenError
from mirrorline.core.leases import DEFAULT_LEASE_MS
from mirrorline.core.security import bind_problem, grpc_security
from mirrorline.core.settings import MirrorSettings
from mirrorline.ports import GRPC_PORTS, METRICS_PORTS, run_ports
from mirrorline.runtime import Service, configure_logging, run_service

if TYPE_CHECKING:
    from mirrorline.flowservice import FlowService

log = logging.getLogger(__name__)

#: Set by `mirrorline run` for the services it starts: it has validated the file and printed
#: its warnings once, so they do not repeat them.
VALIDATED_ENV = "MIRRORLINE_CONFIG_VALIDATED"


def load_settings(path: str, bind: str = "127.0.0.1") -> MirrorSettings | None:
    """Load and check the config (every client setting and TLS store included) and this
    process's gRPC security, printing errors and warnings; None means "exit with status 2"."""
    from mirrorline.kafka.preflight import check_clients
    from mirrorline.secretfiles import check_secret_files

    try:
        settings = load_config(path)
        # From here on no log line shows a secret of the file, at DEBUG either.
        logsecrets.register_config(settings.raw, settings.secret_values)
        client_warnings = check_clients(settings)
        security = grpc_security(settings.raw)
        problem = bind_problem(bind, security)
        if problem is not None:
            raise ConfigError("mirrorline.grpc.tls.certificate", problem, source=path)
        file_warnings = check_secret_files(settings.raw, settings.lines, path)
        process = grpcsecure.load(security)
        if process.client.token:
            logsecrets.register([process.client.token])
        grpcsecure.configure(process)
    except ConfigError as exc:
        print(f"mirrorline: configuration error: {exc}", file=sys.stderr)
        return None
    if os.environ.get(VALIDATED_ENV) != os.path.abspath(path):
        for warning in (*settings.warnings, *client_warnings, *file_warnings):
            # A likely typo is loud: MM2 ignores the key, and so do we, but what it was
            # meant to set is then not set (`config check` refuses the file).
            level = "WARNING, LIKELY TYPO" if warning.suggestions else "warning"
            print(f"mirrorline: {level}: {path}: {warning}", file=sys.stderr)
    return settings


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="MM2 dedicated-mode properties file")
    parser.add_argument("--clusters", nargs="+", metavar="ALIAS",
                        help="only flows whose target is one of these aliases (as MM2)")
    parser.add_argument("--bind", default="127.0.0.1",
                        help="address for the gRPC and metrics listeners (default 127.0.0.1)")
    parser.add_argument("--log-level", default="INFO",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper,
                        help="log level of the service(s) (default %(default)s)")


def register(subparsers: Any) -> None:
    rep = subparsers.add_parser("replicator", help="run a replicator process")
    _common(rep)
    rep.add_argument("--worker", action="store_true",
                     help="copy what the controller assigns (default: every enabled flow, "
                          "standalone)")
    rep.add_argument("--worker-id", default=None, help="name of this worker (default: random)")
    _ports(rep, "replicator")
    rep.set_defaults(handler=_replicator)

    ctl = subparsers.add_parser("controller", help="run a controller (Admin API, assignment)")
    _common(ctl)
    ctl.add_argument("--controller-id", default=None,
                     help="name of this controller (default: random)")
    _ports(ctl, "controller")
    ctl.add_argument("--lease-ms", type=int, default=DEFAULT_LEASE_MS,
                     help="controller and worker lease (default %(default)s ms)")
    ctl.set_defaults(handler=_controller)

    chk = subparsers.add_parser("checkpointer",
                                help="run a checkpointer (checkpoints, offset translation, "
                                     "failover)")
    _common(chk)
    chk.add_argument("--managed", action="store_true",
                     help="take flows from the controller's control log (default: every "
                          "enabled flow of the file)")
    chk.add_argument("--instance-id", default="checkpointer",
                     help="name of this checkpointer (default %(default)s)")
    _ports(chk, "checkpointer")
    chk.set_defaults(handler=_checkpointer)

    hb = subparsers.add_parser("heartbeat",
                               help="run the heartbeat service (MM2 heartbeats, topology, "
                                    "canary, audit)")
    _common(hb)
    hb.add_argument("--managed", action="store_true",
                    help="announce to the controller, which forwards the topology, canary "
                         "and audit requests of the Admin API here")
    hb.add_argument("--instance-id", default="heartbeat",
                    help="name of this heartbeat service (default %(default)s)")
    _ports(hb, "heartbeat")
    hb.set_defaults(handler=_heartbeat)

    cfs = subparsers.add_parser("configsync",
                                help="run the config-sync service (topic configs, partition "
                                     "counts, ACLs, drift plans)")
    _common(cfs)
    cfs.add_argument("--managed", action="store_true",
                     help="take flows from the controller's control log (default: every "
                          "enabled flow of the file)")
    cfs.add_argument("--instance-id", default="configsync",
                     help="name of this instance (default %(default)s)")
    _ports(cfs, "configsync")
    cfs.set_defaults(handler=_configsync)

    run = subparsers.add_parser("run", help="start this deployment's services as processes")
    _common(run)
    run.add_argument("--workers", type=int, default=2, metavar="N",
                     help="replicator workers to start (default 2)")
    run.add_argument("--port-offset", type=int, default=0, metavar="N",
                     help="add N to every service's default gRPC and metrics port")
    run.add_argument("--lease-ms", type=int, default=DEFAULT_LEASE_MS,
                     help="how long the controller's leadership and each worker's "
                          "membership last without renewal: a stopped controller or worker "
                          "is replaced after at most this long (default %(default)s ms)")
    run.add_argument("--spark", action="store_true",
                     help="also start a Spark executor (needs the spark extra and Java 17+)")
    run.add_argument("--spark-master", default="local[*]", metavar="URL",
                     help="Spark master for --spark (default %(default)s)")
    run.set_defaults(handler=_run)


def _ports(parser: argparse.ArgumentParser, service: str) -> None:
    parser.add_argument("--grpc-port", type=int, default=GRPC_PORTS[service])
    parser.add_argument("--metrics-port", type=int, default=METRICS_PORTS[service],
                        help="Prometheus /metrics port (-1 disables)")
    parser.add_argument("--advertise", default=None, metavar="HOST:PORT",
                        help="gRPC address other services use to reach this one "
                             "(default: 127.0.0.1:<grpc port>)")


def _serve(factory: Callable[[], Service]) -> int:
    """Run a service; a configuration error it finds at start, or an address it cannot
    listen on (`--bind`, a port in use), exits with status 2 and one line."""
    try:
        return run_service(factory)
    except ConfigError as exc:
        print(f"mirrorline: configuration error: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:
        print(f"mirrorline: {exc}", file=sys.stderr)
        return 2


def _replicator(args: argparse.Namespace) -> int:
    configure_logging("replicator", args.log_level)
    settings = load_settings(args.config, args.bind)
    if settings is None:
        return 2
    from mirrorline.replicator.service import ReplicatorService

    worker = args.worker_id or f"replicator-{uuid.uuid4().hex[:6]}"
    return _serve(lambda: ReplicatorService(
        settings, worker_id=worker, targets=args.clusters, grpc_host=args.bind,
        grpc_port=args.grpc_port, metrics_host=args.bind,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        worker=args.worker, advertise=args.advertise))


def _controller(args: argparse.Namespace) -> int:
    configure_logging("controller", args.log_level)
    settings = load_settings(args.config, args.bind)
    if settings is None:
        return 2
    from mirrorline.controller.service import ControllerService

    controller_id = args.controller_id or f"controller-{uuid.uuid4().hex[:6]}"
    return _serve(lambda: ControllerService(
        settings, controller_id=controller_id, targets=args.clusters, grpc_host=args.bind,
        grpc_port=args.grpc_port, advertise=args.advertise, metrics_host=args.bind,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        lease_ms=args.lease_ms, worker_lease_ms=args.lease_ms))


def _checkpointer(args: argparse.Namespace) -> int:
    from mirrorline.checkpointer.service import CheckpointerService

    return _flow_service(args, CheckpointerService)


def _flow_service(args: argparse.Namespace, service: type[FlowService[Any]]) -> int:
    """The checkpointer, heartbeat or config sync: the same options make the same
    service."""
    configure_logging(service.kind, args.log_level)
    settings = load_settings(args.config, args.bind)
    if settings is None:
        return 2
    return _serve(lambda: service(
        settings, instance_id=args.instance_id, targets=args.clusters,
        grpc_host=args.bind, grpc_port=args.grpc_port, metrics_host=args.bind,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        managed=args.managed, advertise=args.advertise))


def _heartbeat(args: argparse.Namespace) -> int:
    for noisy in ("faust", "mode"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING,
                                              logging.getLevelName(args.log_level.upper())))
    from mirrorline.heartbeat.service import HeartbeatService

    return _flow_service(args, HeartbeatService)


def _configsync(args: argparse.Namespace) -> int:
    from mirrorline.configsync.service import ConfigSyncService

    return _flow_service(args, ConfigSyncService)


def _run(args: argparse.Namespace) -> int:
    configure_logging("run", args.log_level)
    settings = load_settings(args.config, args.bind)
    if settings is None:
        return 2
    if not settings.enabled_flows(tuple(args.clusters) if args.clusters else None):
        print("mirrorline: configuration error: no enabled replication flow "
              "(set '<source>-><target>.enabled = true')", file=sys.stderr)
        return 2
    # The services started below read the same file: its warnings were printed above.
    os.environ[VALIDATED_ENV] = os.path.abspath(args.config)
    common = ["--config", args.config, "--bind", args.bind, "--log-level", args.log_level]
    if args.clusters:
        common += ["--clusters", *args.clusters]
    def ports(service: str, index: int = 0) -> tuple[str, ...]:
        return ("--grpc-port", str(GRPC_PORTS[service] + args.port_offset + index),
                "--metrics-port", str(METRICS_PORTS[service] + args.port_offset + index))

    if args.workers < 1:
        print("mirrorline: --workers must be at least 1", file=sys.stderr)
        return 2
    # A service that cannot bind its port would fail, and `run` stop everything; say once,
    # up front, which port is held and by what. The ports are claimed first and held while
    # `run` lives (see `dev.portcheck.claim`), so of two runs started together only one
    # gets past this point, however close together they start.
    from mirrorline.dev.portcheck import PortTaken, claim, holder, is_free
    from mirrorline.ports import check_listenable
    try:  # first the address itself: an address not of this host holds no port
        asyncio.run(check_listenable(args.bind, 0, "gRPC"))
    except ListenError as exc:
        reason = str(exc).split(": ", 1)[-1].split("; ")[0]
        print(f"mirrorline: cannot listen on {args.bind}: {reason}; check --bind",
              file=sys.stderr)
        return 2
    uses = {port: use for use, port in run_ports(args.workers, args.port_offset,
                                                 spark=args.spark).items()}

    def in_use(port: int, by: str) -> int:
        print(f"mirrorline: port {port} ({uses[port]}) on {args.bind} is in use by {by}; "
              "stop it, or move every service's ports with --port-offset N",
              file=sys.stderr)
        return 2

    try:
        with claim(args.bind, uses):  # held until every service has stopped
            taken = [port for port in sorted(uses) if not is_free(port, args.bind)]
            if taken:
                return in_use(taken[0], holder(taken[0]))
            return _supervise(args, common, ports)
    except PortTaken as exc:
        return in_use(exc.port, exc.holder)


def _supervise(args: argparse.Namespace, common: list[str],
               ports: Callable[..., tuple[str, ...]]) -> int:
    from mirrorline.supervisor import ChildSpec, Supervisor

    children = [ChildSpec("controller", ("controller", *common, *ports("controller"),
                                         "--controller-id", "controller-0",
                                         "--lease-ms", str(args.lease_ms)))]
    children += [ChildSpec(f"replicator-{i}", ("replicator", "--worker", *common,
                                               *ports("replicator", i),
                                               "--worker-id", f"replicator-{i}"))
                 for i in range(args.workers)]
    if args.spark:
        children.append(ChildSpec("spark-executor", (
            "spark-executor", *common, *ports("spark-executor"), "--executor-id", "0",
            "--master", args.spark_master)))
    children.append(ChildSpec("checkpointer", ("checkpointer", "--managed", *common,
                                                *ports("checkpointer"),
                                                "--instance-id", "checkpointer-0")))
    children.append(ChildSpec("heartbeat", ("heartbeat", "--managed", *common,
                                             *ports("heartbeat"),
                                             "--instance-id", "heartbeat-0")))
    children.append(ChildSpec("configsync", ("configsync", "--managed", *common,
                                              *ports("configsync"),
                                              "--instance-id", "configsync-0")))
    return asyncio.run(Supervisor(children).run())
