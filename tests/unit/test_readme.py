"""The README's ports table says what the code does (its key tables moved to
docs/configuration-keys.md, checked by test_key_reference.py)."""

from __future__ import annotations

from pathlib import Path

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


def test_ports_table_matches_the_defaults_the_services_use() -> None:
    rows = {r[0]: (int(r[1]), int(r[2])) for r in table_rows("## Status, health and ports")}
    assert rows == {s: (GRPC_PORTS[s], METRICS_PORTS[s]) for s in GRPC_PORTS}
