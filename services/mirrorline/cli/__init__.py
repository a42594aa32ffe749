"""The `mirrorline` command line: one entry point, one module per command group."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

#: Modules that each expose `register(subparsers)`; every parser they add sets
#: `handler=<callable(args) -> int>` through `set_defaults`.
_COMMAND_MODULES = (
    "mirrorline.cli.services",
    "mirrorline.cli.dev",
    "mirrorline.cli.admin",
    "mirrorline.cli.spark",
    "mirrorline.cli.health",
    "mirrorline.cli.config_check",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mirrorline",
        description="Mirror Kafka clusters into each other (MM2-compatible).",
    )
    from mirrorline import __version__

    parser.add_argument("--version", action="version", version=f"mirrorline {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    register_modules(_COMMAND_MODULES, subparsers)
    return parser


def register_modules(names: Sequence[str], subparsers: Any) -> None:
    """`register(subparsers)` of each module in `names`; a module that is not there (a
    command not built into this installation) is skipped, any other import error is not."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    result: int = handler(args)
    return result
