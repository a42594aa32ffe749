"""Typos in an MM2 file are caught (issue 22, item 5).

MM2 drops an unknown key silently, so `a->b.topcis = orders` leaves the flow on the default
`topics = .*`: it mirrors every topic. An unknown key nearly equal to a known one gets
"did you mean ...?" on its own line; `config check` fails on it, `run` and the services
warn loudly and otherwise keep MM2's tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mirrorline.cli import main
from mirrorline.cli.services import load_settings
from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.typos import close_matches, edit_distance, or_list

BASE = ("clusters = primary, backup\n"
        "primary.bootstrap.servers = p1:9092\n"
        "backup.bootstrap.servers = b1:9092\n"
        "primary->backup.enabled = true\n")
BASE_LINES = 4


# --- the pure matching ------------------------------------------------------------------------


@pytest.mark.parametrize(("a", "b", "distance"), [
    ("topics", "topics", 0),
    ("topcis", "topics", 1),          # two neighbours swapped: one edit
    ("topic", "topics", 1),
    ("topiks", "topics", 1),
    ("bootstrap.server", "bootstrap.servers", 1),
    ("sync.groups.offset.enabled", "sync.group.offsets.enabled", 2),
    ("groups", "topics", 3),          # beyond the limit: reported as limit + 1
])
def test_edit_distance_counts_a_swap_as_one_edit(a: str, b: str, distance: int) -> None:
    assert edit_distance(a, b, 2) == min(distance, 3)


@pytest.mark.parametrize(("word", "expected"), [
    ("topcis", ("topics",)),
    ("Topics", ("topics",)),                                  # case alone
    ("emit.checkpoint.interval.seconds", ("emit.checkpoints.interval.seconds",)),
    ("sync.groups.offset.enabled", ("sync.group.offsets.enabled",)),  # long: two edits
    ("tpcs", ()),                                             # short: one edit only
    ("groups", ()),                                           # a known name is not a typo
    ("colour", ()),
])
def test_close_matches_of_whole_names(word: str, expected: tuple[str, ...]) -> None:
    known = ("topics", "groups", "emit.checkpoints.interval.seconds",
             "sync.group.offsets.enabled", "sync.group.offsets.interval.seconds")
    assert close_matches(word, known) == expected


def test_close_matches_of_families_keep_the_rest_as_written() -> None:
    families = ("consumer.", "producer.", "primary.ssl.", "ssl.")
    assert close_matches("consumr.fetch.min.bytes", (), families) == (
        "consumer.fetch.min.bytes",)
    assert close_matches("primry.ssl.truststore.location", (), families) == (
        "primary.ssl.truststore.location",)
    # A family too short to guess from: any three letters are near `ssl`.
    assert close_matches("sql.url", (), families) == ()


def test_equally_near_names_are_all_offered() -> None:
    assert close_matches("tpics", ("topics", "tapics", "tropics")) == ("tapics", "topics")
    assert or_list(["a"]) == "a"
    assert or_list(["a", "b", "c"]) == "a, b or c"


# --- the loader -------------------------------------------------------------------------------


def warnings_of(extra: str) -> dict[str, tuple[int | None, tuple[str, ...], str]]:
    settings = parse_config(BASE + extra)
    return {w.key: (w.line, w.suggestions, w.message) for w in settings.warnings}


@pytest.mark.parametrize(("line", "suggestion"), [
    ("primary->backup.topcis = orders", "primary->backup.topics"),
    ("primary->backup.consumr.max.poll.records = 5",
     "primary->backup.consumer.max.poll.records"),
    ("primary->backup.replication.policy.seperator = _",
     "primary->backup.replication.policy.separator"),
    ("primary->backup.offset.syncs.topic.location = target",
     "primary->backup.offset-syncs.topic.location"),
    ("topcs = orders", "topics"),
    ("mirrorline.deploymnet = eu", "mirrorline.deployment"),
    ("backup.security.protocl = SSL", "backup.security.protocol"),
    ("primry.ssl.truststore.location = /ca.pem", "primary.ssl.truststore.location"),
    ("primary-backup.topics = orders", "primary->backup.topics"),
])
def test_a_likely_typo_names_the_key_it_was_meant_to_be_on_its_own_line(
        line: str, suggestion: str) -> None:
    key = line.split(" = ")[0]
    warned_line, suggestions, message = warnings_of(line + "\n")[key]
    assert warned_line == BASE_LINES + 1
    assert suggestions == (suggestion,)
    assert f"did you mean {suggestion}?" in message


def test_keys_that_are_no_typos_get_no_suggestion() -> None:
    warnings = warnings_of("some.other.tool = 1\ntasks.max = 4\nc.bootstrap.servers = c:1\n")
    assert all(not suggestions for _, suggestions, _ in warnings.values())
    assert set(warnings) == {"some.other.tool", "tasks.max", "c.bootstrap.servers"}


def test_a_misspelt_bootstrap_servers_is_reported_at_its_own_line() -> None:
    text = ("clusters = primary, backup\n"
            "backup.bootstrap.servers = b1:9092\n"
            "primary.bootstrap.server = p1:9092\n")
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="mm2.properties")
    assert str(info.value).startswith("mm2.properties:3: primary.bootstrap.server: ")
    assert "did you mean primary.bootstrap.servers?" in str(info.value)


def test_a_misspelt_flow_alias_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BASE + "primary->bakup.topics = orders\n")
    assert "did you mean 'backup'?" in str(info.value)
    assert info.value.line == BASE_LINES + 1


# --- the CLI ----------------------------------------------------------------------------------


def test_config_check_fails_on_a_typo_and_run_warns_loudly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`config check` exits 2 naming the line and the key meant; the services (and `run`,
    which loads the file the same way) start, with a WARNING saying it is a likely typo."""
    path = tmp_path / "mm2.properties"
    path.write_text(BASE + "topics.exclude = tmp.*\nprimary->backup.topcis = orders\n")
    assert main(["config", "check", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (f"mirrorline: configuration error: {path}:{BASE_LINES + 2}: "
            "primary->backup.topcis: unknown key -- did you mean primary->backup.topics?"
            in err)
    settings = load_settings(str(path))
    assert settings is not None
    assert settings.flows["primary->backup"].topics == (".*",)  # MM2's reading
    err = capsys.readouterr().err
    assert (f"mirrorline: WARNING, LIKELY TYPO: {path}: line {BASE_LINES + 2}: "
            "primary->backup.topcis: unknown key -- did you mean primary->backup.topics?"
            in err)
