"""`mirrorline spark-executor`: run a Spark executor (a worker of kind `spark`).

Everything that can be checked before Spark starts is checked first -- the `spark` extra,
Java, the master URL (and that a standalone master answers), every `--spark-conf`, and
that Spark's ports can be as safe as the gRPC ones (`preflight.network_conf`) -- and each
problem exits with status 2 and one line naming it.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from typing import Any

from mirrorline import grpcsecure
from mirrorline.core.errors import ConfigError
from mirrorline.runtime import configure_logging

DEFAULT_MASTER = "local[*]"


def register(subparsers: Any) -> None:
    from mirrorline.cli.services import _common, _ports

    ex = subparsers.add_parser("spark-executor",
                               help="run a Spark executor: partitions the controller offloads "
                                    "are copied by a PySpark streaming query")
    _common(ex)
    ex.add_argument("--master", default=DEFAULT_MASTER, metavar="URL",
                    help="Spark master: local[*] (default), local[N], spark://HOST:PORT, "
                         "k8s://https://HOST:PORT")
    ex.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting (repeatable), e.g. spark.executor.memory=2g")
    ex.add_argument("--executor-id", default=None,
                    help="name of this executor; the controller shows it as spark:<id> "
                         "(default: random)")
    _ports(ex, "spark-executor")
    ex.set_defaults(handler=_spark_executor)


def _spark_executor(args: argparse.Namespace) -> int:
    from mirrorline.cli.services import _serve, load_settings

    configure_logging("spark-executor", args.log_level)
    settings = load_settings(args.config, args.bind)
    if settings is None:
        return 2
    try:
        from mirrorline_spark.executor import preflight

        preflight.check_pyspark()
        preflight.check_master(args.master)
        security = grpcsecure.current().settings
        conf = preflight.network_conf(preflight.parse_spark_conf(args.spark_conf),
                                      master=args.master, bind=args.bind, tls=security.tls,
                                      insecure=security.insecure)
        preflight.java_executable()
    except ConfigError as exc:
        print(f"mirrorline: configuration error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        print(f"mirrorline: configuration error: {exc.name} is not installed: the Spark "
              "executor needs the extra `pip install 'mirrorline[spark]'`", file=sys.stderr)
        return 2
    from mirrorline_spark.executor.service import SparkExecutorService

    executor_id = args.executor_id or uuid.uuid4().hex[:6]
    return _serve(lambda: SparkExecutorService(
        settings, executor_id=executor_id, master=args.master, spark_conf=conf,
        targets=args.clusters, grpc_host=args.bind, grpc_port=args.grpc_port,
        metrics_host=args.bind,
        metrics_port=None if args.metrics_port < 0 else args.metrics_port,
        advertise=args.advertise))
