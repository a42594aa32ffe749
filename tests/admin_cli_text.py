"""Helpers of the `mirrorline admin` CLI tests (`test_admin_cli*.py`)."""

from __future__ import annotations

import argparse

from mirrorline.cli import build_parser


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["admin", *argv])


def columns(line: str) -> list[str]:
    """Cells of a rendered table line (cells hold no double blanks in these tests)."""
    return [cell.strip() for cell in line.split("  ") if cell.strip()]
