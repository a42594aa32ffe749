"""The README's tables of defaults and ports say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

from mirrorline.core.config import MIRRORLINE_DEFAULT_OVERRIDES
from mirrorline.ports import GRPC_PORTS, METRICS_PORTS

README = (Path(__file__).parents[2] / "README.md").read_text()


def table_rows(heading: str) -> list[list[str]]:
    section = README.split(heading, 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows[1:]  # without the header


def test_every_changed_default_is_documented_with_both_values() -> None:
    rows = {r[0]: (r[1], r[2]) for r in table_rows("### Defaults that differ from MM2")}
    expected = {key: (mm2, ours) for key, (mm2, ours, _) in MIRRORLINE_DEFAULT_OVERRIDES.items()}
    assert rows == expected


def test_ports_table_matches_the_defaults_the_services_use() -> None:
    rows = {r[0]: (int(r[1]), int(r[2])) for r in table_rows("## Status, health and ports")}
    assert rows == {s: (GRPC_PORTS[s], METRICS_PORTS[s]) for s in GRPC_PORTS}


def test_keys_table_shows_mirrorlines_own_defaults() -> None:
    rows = {r[0]: r[1] for r in table_rows("### Keys")}
    for key, (_, ours, _) in MIRRORLINE_DEFAULT_OVERRIDES.items():
        if key in rows:
            assert re.sub(r"`", "", rows[key]) == ours, key
