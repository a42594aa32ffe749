"""`mirrorline.core` holds the rules and no I/O: no files, environment, sockets or processes.

The services and `mirrorline.configfile` do the reading and hand `core` text and lookups;
this scan fails when a module of `core` reaches for the outside world again.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "services" / "mirrorline" / "core"

#: Modules whose import alone means I/O (or a way to it).
FORBIDDEN_MODULES = frozenset({"os", "pathlib", "socket", "subprocess", "shutil", "tempfile",
                               "io", "glob", "asyncio", "selectors", "ssl", "urllib", "http",
                               "aiokafka", "grpc"})
#: Modules of those packages that hold pure computation only: aiokafka's record checksums
#: (CRC-32C, compiled where its extensions are), which the batch codec needs.
PURE_MODULES = frozenset({"aiokafka.record.util"})
#: Builtins and attributes that read or write the outside world.
FORBIDDEN_CALLS = frozenset({"open", "input", "getenv", "putenv"})
FORBIDDEN_ATTRIBUTES = frozenset({"environ", "read_text", "read_bytes", "write_text",
                                  "write_bytes", "getcwd"})


def io_uses(source: str) -> list[str]:
    """Every I/O reach of one module's source, as `line: what`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module is not None \
                and node.module.split(".")[0] in FORBIDDEN_MODULES \
                and node.module not in PURE_MODULES:
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in FORBIDDEN_CALLS:
            found.append(f"{node.lineno}: {node.func.id}()")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
    return sorted(found, key=lambda f: int(f.split(":")[0]))


@pytest.mark.parametrize("module", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_module_does_no_io(module: Path) -> None:
    assert io_uses(module.read_text()) == [], (
        f"{module.name} reaches outside the process; move the I/O to an adapter "
        "(mirrorline.configfile, mirrorline.kafka) and pass text or lookups in")


def test_the_scan_sees_each_kind_of_io() -> None:
    """The scan itself: each way back to I/O is caught."""
    assert io_uses("import os\nfrom pathlib import Path\nimport socket\n"
                   "open('f')\nx.environ\nPath('f').read_text()\nimport subprocess\n") == [
        "1: import os", "2: from pathlib import ...", "3: import socket", "4: open()",
        "5: .environ", "6: .read_text", "7: import subprocess"]
    assert io_uses("import posixpath\nimport re\nx.open(1)\n") == []
