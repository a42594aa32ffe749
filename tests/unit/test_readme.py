"""The docs' tables say what the code does: the README's ports table.

The key tables ("Keys", "Defaults that differ from MM2") left the README for the page
generated from the settings' declarations, `docs/configuration-keys.md`, which its own test
keeps true.
"""

from __future__ import annotations

from pathlib import Path

from mirrorline.ports import GRPC_PORTS, METRICS_PORTS

README = (Path(__file__).parents[2] / "README.md").read_text()


def table_rows(heading: str, text: str = README) -> list[list[str]]:
    section = text.split(heading, 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip().strip("`") for cell in line.strip("|").split("|")])
    return rows[1:]  # without the header


def test_ports_table_matches_the_defaults_the_services_use() -> None:
    rows = {r[0]: (int(r[1]), int(r[2])) for r in table_rows("## The services and their ports")}
    assert rows == {s: (GRPC_PORTS[s], METRICS_PORTS[s]) for s in GRPC_PORTS}
