"""Patterns that take a backtracking engine minutes or hours are matched in linear time.

The names are those of the issue: `(a+)+$` against a long run of `a` that fails at the
end, `(.+)+@` against internal topic names that always exist. With Python's `re` the
first of these takes longer than the universe's age; here each test finishes at once or
the per-test timeout fails it.
"""

from __future__ import annotations

import pytest

from mirrorline.core.errors import ConfigError
from mirrorline.core.filters import GroupFilter, TopicFilter, compile_patterns

pytestmark = pytest.mark.timeout(20)

LONG = "a" * 5000 + "-x"


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("(a+)+$", LONG, False),
    ("(a+)+$", "a" * 5000, True),
    ("(.+)+@", "mirrorline.control.internal", False),
    ("(.+)+@", "mm2-offsets.primary.internal" * 100, False),
    ("(.+)+@", "x" * 3000 + "@", True),
    ("(a|aa)+b", "a" * 5000, False),
    ("(a*)*b", "a" * 5000, False),
    ("([a-z]+\\.?)+\\d", "a.b" * 2000 + "x", False),
])
def test_catastrophic_patterns_match_in_linear_time(pattern: str, name: str,
                                                    matches: bool) -> None:
    compiled = compile_patterns([pattern], key="topics")
    assert compiled is not None
    assert (compiled.fullmatch(name) is not None) is matches


def test_filters_with_catastrophic_patterns_still_select_the_right_topics() -> None:
    topics = TopicFilter(["orders", "(a+)+$", "(.+)+@"])
    names = ["orders", LONG, "mirrorline.control.internal", "payments", "aaaa", "xy@"]
    assert [n for n in names if topics.accepts(n)] == ["orders", "aaaa", "xy@"]
    groups = GroupFilter(["(.+)+@"], [])
    assert not groups.accepts("billing" * 500)


@pytest.mark.parametrize("pattern", ["(?=a)a", "(?>a+)b", "a++", "(a)\\1", "(?<!x)y"])
def test_backtracking_only_constructs_are_refused_naming_the_key(pattern: str) -> None:
    with pytest.raises(ConfigError) as info:
        compile_patterns(["ok", pattern], key="groups.exclude")
    assert info.value.key == "groups.exclude"
    assert "backtracking" in info.value.message


def test_ordinary_patterns_match_as_before() -> None:
    flt = TopicFilter(["orders.*", "payments", "audit-\\d{2}"],
                      [".*[\\-\\.]internal", ".*\\.replica", "__.*"])
    accepted = [n for n in ("orders", "orders-eu", "payments", "payments2", "audit-07",
                            "audit-7", "orders.internal", "__consumer_offsets", "x.replica")
                if flt.accepts(n)]
    assert accepted == ["orders", "orders-eu", "payments", "audit-07"]


def test_a_value_that_would_stall_the_provider_reference_check_is_read_at_once() -> None:
    """`${` and thousands of `:` took a backtracking search minutes (cubic); any property
    value passes this check, including those sent through the Admin API."""
    from mirrorline.core._config_providers import has_reference as has_provider_reference

    assert not has_provider_reference("${" + ":" * 16_000)
    assert has_provider_reference("${file:/etc/secret.properties:password}")
    assert has_provider_reference("x ${env:HOME} y")
    assert not has_provider_reference("$HOME and {braces}")


def test_a_list_with_a_long_run_of_spaces_splits_at_once() -> None:
    """A regex split on `\\s*,\\s*` is quadratic on whitespace without a comma (2 s for a
    16 000-character value, re-parsed by every service whenever settings are built)."""
    from mirrorline.core.filters import parse_list

    assert parse_list("a" + " " * 16_000 + "b") == ("a" + " " * 16_000 + "b",)
    assert parse_list(" a ,\tb , ,c\x0b,") == ("a", "b", "", "c", "")


@pytest.mark.parametrize(("pattern", "limit"), [
    ("(" * 3000 + "a" + ")" * 3000, "at most 4096"),       # the record
    ("(" * 600 + "a" + ")" * 600, "at most 32 levels"),     # short, but deep
    ("(?i)" * 40 + "a", "at most 32 levels"),               # inline flags nest too
    ("(?:x|" * 40 + "y" + ")" * 40, "at most 32 levels"),
])
def test_deep_or_long_patterns_are_refused_naming_the_key_and_the_limit(
        pattern: str, limit: str) -> None:
    """Python's parser recursed once per group: such a pattern raised RecursionError in
    every service that compiled it, instead of a configuration error naming the key."""
    with pytest.raises(ConfigError) as info:
        TopicFilter(["orders", pattern])
    assert info.value.key == "topics"
    assert limit in info.value.message
    assert "pattern 2 " in info.value.message
    assert len(str(info.value)) < 300  # the pattern is not echoed whole


def test_long_lists_of_ordinary_patterns_are_not_bounded_by_the_pattern_limit() -> None:
    topics = TopicFilter([f"orders-{i:04d}" for i in range(2_000)] + ["(" * 32 + "x" + ")" * 32])
    assert topics.accepts("orders-1999")
    assert topics.accepts("x")
