"""`mirrorline health`: ask a local service's gRPC health, with the deployment's TLS.

Kubernetes' built-in gRPC probe speaks plaintext only, so with TLS on, probes run this
instead: it reads the same properties file as the service (so it trusts the same CA and
presents the service certificate) and exits 0 when the service reports SERVING.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mirrorline import grpcsecure


def _health(args: argparse.Namespace) -> int:
    from mirrorline.cli.services import load_settings

    if load_settings(args.config) is None:
        return 2
    address = f"127.0.0.1:{args.port}"
    with grpcsecure.blocking_channel(address, grpcsecure.current().client) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=args.timeout)
        except grpc.RpcError as exc:
            print(f"mirrorline: {address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(name)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("health", help="check a local service's gRPC health "
                                                  "(for probes; uses the file's TLS settings)")
    parser.add_argument("--config", required=True, metavar="FILE")
    parser.add_argument("--port", type=int, required=True, help="the service's gRPC port")
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.set_defaults(handler=_health)
