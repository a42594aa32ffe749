"""`mirrorline dev prometheus install|path`: Debian's Prometheus, for the dashboards' test."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mirrorline.dev.prometheus import PrometheusNotInstalled, binary, install


def register(dev_sub: Any) -> None:
    prometheus = dev_sub.add_parser(
        "prometheus", help="Debian's prometheus package, unpacked per user (no root)")
    sub = prometheus.add_subparsers(dest="prometheus_command", metavar="ACTION", required=True)
    inst = sub.add_parser(
        "install", help="fetch Debian's prometheus .deb and unpack it into the user cache",
        description="Fetch Debian's prometheus package (apt-get download, else the URL apt "
                    "gives, else the pinned Debian mirror URL) and unpack it into "
                    "$XDG_CACHE_HOME/mirrorline/prometheus-VERSION (~/.cache/... by "
                    "default). Needs neither root nor dpkg. Does nothing when present.")
    inst.set_defaults(handler=_install)
    path = sub.add_parser("path", help="print the prometheus binary the tests run "
                                       "(exit 1 if there is none)")
    path.set_defaults(handler=_path)


def _install(args: argparse.Namespace) -> int:
    try:
        path = install()
    except (PrometheusNotInstalled, OSError) as exc:
        print(f"mirrorline: dev prometheus install: {exc}", file=sys.stderr)
        return 1
    print(f"Prometheus in {path}")
    return 0


def _path(args: argparse.Namespace) -> int:
    path = binary()
    if path is None:
        print("mirrorline: no prometheus binary: run 'mirrorline dev prometheus install' "
              "or 'make prometheus'", file=sys.stderr)
        return 1
    print(path)
    return 0
