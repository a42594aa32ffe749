"""The declared settings are the one source of the key reference and of the defaults.

`docs/configuration-keys.md` is generated from `mirrorline.core._config_decl.SETTINGS`
(`mirrorline dev docs`). These checks replace the README's key-table checks (its "Keys" and
"Defaults that differ from MM2" sections moved to that page).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorline.core._config_decl import LEVELS, SETTINGS, Setting, key_reference
from mirrorline.core.config import DEFAULTS, MIRRORLINE_DEFAULT_OVERRIDES, parse_config

DOCS = Path(__file__).parents[2] / "docs"
REFERENCE = DOCS / "configuration-keys.md"
BASE = "clusters = a, b\na.bootstrap.servers = a1:9092\nb.bootstrap.servers = b1:9092\n"


def table_rows(text: str, heading: str | None = None) -> list[list[str]]:
    """Body rows of every Markdown table (under `heading` only, when given), cells stripped
    of blanks and backticks."""
    if heading is not None:
        text = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows: list[list[str]] = []
    header = True
    for line in text.splitlines():
        if not line.startswith("|"):
            header = True
            continue
        if line.startswith("|---"):
            continue
        if header:
            header = False
            continue
        rows.append([c.strip().strip("`") for c in re.split(r"(?<!\\)\|", line.strip("|"))])
    return rows


def test_the_committed_reference_is_what_the_declarations_generate() -> None:
    assert REFERENCE.read_text() == key_reference(), (
        "docs/configuration-keys.md is stale: run `mirrorline dev docs`")


def test_every_declared_key_is_documented_and_every_documented_key_declared() -> None:
    """Over every key table of docs/ (a table whose first column is "Key")."""
    documented: set[str] = set()
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for table in re.split(r"\n(?=\| *Key *\|)", text)[1:]:
            documented |= {row[0] for row in table_rows(table.split("\n\n", 1)[0])}
    declared = {s.name for s in SETTINGS}
    assert documented - declared == set(), "documented but not declared"
    assert declared - documented == set(), "declared but not documented"


def test_every_changed_default_is_documented_with_both_values_and_why() -> None:
    rows = {r[0]: (r[1], r[2], r[3])
            for r in table_rows(REFERENCE.read_text(), "## Defaults that differ from MM2")}
    assert rows == MIRRORLINE_DEFAULT_OVERRIDES
    assert all(why for _, _, why in rows.values())


def test_the_key_tables_show_the_defaults_the_loader_applies() -> None:
    shown = {r[0]: r[4] for r in table_rows(REFERENCE.read_text()) if len(r) == 6}
    for key, default in DEFAULTS.items():
        assert shown[key] == (default or "(empty)"), key


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.reader is not None
                                     and s.default is not None], ids=lambda s: s.name)
def test_each_declared_default_passes_its_own_reader(setting: Setting) -> None:
    assert setting.reader is not None and setting.default is not None
    setting.reader(setting.default)


@pytest.mark.parametrize("setting", [s for s in SETTINGS if "flow" in LEVELS[s.kind]
                                     and s.default is not None], ids=lambda s: s.name)
def test_a_declared_flow_key_is_known_at_flow_level(setting: Setting) -> None:
    """No declared flow key draws a warning of its own where the reference says it may
    be written (unknown, no effect, or "no effect yet" unless declared so)."""
    settings = parse_config(BASE + f"a->b.{setting.name} = {setting.default}\n")
    own = [w for w in settings.warnings if w.key == f"a->b.{setting.name}"]
    if setting.not_acted_on is None:
        assert own == [], setting.name
    else:
        assert ["no effect yet" in w.message for w in own] == [True], setting.name


def test_config_check_lists_the_changed_defaults_in_effect() -> None:
    """`config check` says which of Mirrorline's own defaults apply to this file: those of
    the declarations that differ from MM2's and that the file does not set."""
    import io

    from mirrorline.cli.config_check import print_summary

    settings = parse_config(BASE + "a->b.enabled = true\n"
                            "a->b.refresh.topics.interval.seconds = 600\n")
    out = io.StringIO()
    print_summary(settings, out, warnings=0)
    listed = out.getvalue().split("defaults that differ from MM2", 1)[1].splitlines()[1:]
    assert listed == [f"  {key} = {ours} (MM2: {mm2})"
                      for key, (mm2, ours, _) in MIRRORLINE_DEFAULT_OVERRIDES.items()
                      if key != "refresh.topics.interval.seconds"]


def test_a_key_declared_as_not_acted_on_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shipped key is declared so today; the warning path stays for the next one."""
    from mirrorline.core import _config_keys as keys

    assert dict(keys.NOT_YET_ACTED_ON) == {
        s.name: s.not_acted_on for s in SETTINGS if s.not_acted_on is not None} == {}
    monkeypatch.setattr(keys, "NOT_YET_ACTED_ON", {"offset.lag.max": "not wired up"})
    settings = parse_config(BASE + "a->b.offset.lag.max = 5\n")
    assert [w.message for w in settings.warnings if w.key == "a->b.offset.lag.max"] == [
        "read and checked, but it has no effect yet: not wired up"]
