"""`mirrorline dev docs`: write the key reference generated from the declared settings.

`docs/configuration-keys.md` is generated from `mirrorline.core._config_decl.SETTINGS`;
`--check` only compares (exit status 1 when the file differs), as the unit test does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mirrorline.core._config_decl import key_reference

#: The committed reference, beside the source tree (services/mirrorline/cli -> repository).
DEFAULT_OUTPUT = Path(__file__).resolve().parents[3] / "docs" / "configuration-keys.md"


def register(dev_sub: Any) -> None:
    p = dev_sub.add_parser("docs", help="write docs/configuration-keys.md from the declared "
                                        "settings")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                   help=f"where to write it (default {DEFAULT_OUTPUT})")
    p.add_argument("--check", action="store_true",
                   help="only compare; exit status 1 when the file is not what the "
                        "declarations generate")
    p.set_defaults(handler=_docs)


def _docs(args: argparse.Namespace) -> int:
    text = key_reference()
    path: Path = args.output
    if args.check:
        try:
            same = path.read_text() == text
        except OSError as e:
            print(f"mirrorline: cannot read {path}: {e.strerror or e}", file=sys.stderr)
            return 1
        if not same:
            print(f"mirrorline: {path} differs from the declared settings; run "
                  "`mirrorline dev docs`", file=sys.stderr)
            return 1
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    return 0
