"""Java `.properties` syntax, as `java.util.Properties.load` reads it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirrorline.core.errors import ConfigError
from mirrorline.core.properties import Property, duplicates, last_wins, parse_properties


def as_dict(text: str) -> dict[str, str]:
    return {p.key: p.value for p in parse_properties(text)}


@pytest.mark.parametrize(("line", "key", "value"), [
    ("a=b", "a", "b"),
    ("a:b", "a", "b"),
    ("a b", "a", "b"),
    ("a = b", "a", "b"),
    ("a\t:\tb", "a", "b"),
    ("a \f b", "a", "b"),
    ("   a   =   b", "a", "b"),
    ("a=b=c", "a", "b=c"),
    ("a:=b", "a", "=b"),           # the first separator ends the key, the second is value
    ("a =:b", "a", ":b"),          # whitespace then one '=' form a single separator
    ("a b c", "a", "b c"),
    ("a=", "a", ""),
    ("a", "a", ""),
    ("a = b  ", "a", "b  "),       # trailing whitespace belongs to the value (Java)
    ("a = b # not a comment", "a", "b # not a comment"),
    ("A->B.enabled = true", "A->B.enabled", "true"),
    ("us-east->us-west.topics=.*", "us-east->us-west.topics", ".*"),
])
def test_separators(line: str, key: str, value: str) -> None:
    assert parse_properties(line) == [Property(key, value, 1)]


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# hash\n! bang\n   # indented\n\t! tab-indented\n\n   \na=1\n"
    assert parse_properties(text) == [Property("a", "1", 7)]


def test_continuation_drops_leading_whitespace_of_next_lines() -> None:
    text = "topics = a, \\\n        b, \\\n\t\tc\nnext=1\n"
    assert parse_properties(text) == [Property("topics", "a, b, c", 1), Property("next", "1", 4)]


def test_continuation_line_that_looks_like_a_comment_is_value() -> None:
    assert as_dict("a = x\\\n  # y\n") == {"a": "x# y"}


def test_comment_line_ending_in_backslash_does_not_continue() -> None:
    assert as_dict("# comment \\\na = 1\n") == {"a": "1"}


def test_even_number_of_backslashes_does_not_continue() -> None:
    assert as_dict("a = x\\\\\nb = 2\n") == {"a": "x\\", "b": "2"}


def test_blank_line_ends_a_continuation() -> None:
    assert as_dict("a = x\\\n\nb = 2\n") == {"a": "x", "b": "2"}


def test_continuation_at_end_of_input() -> None:
    assert as_dict("a = x\\") == {"a": "x"}


def test_continued_key() -> None:
    assert as_dict("sync.topic.\\\n   acls.enabled = false") == {"sync.topic.acls.enabled": "false"}


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings(newline: str) -> None:
    text = newline.join(["# c", "a = 1\\", "  2", "b = 3", ""])
    assert parse_properties(text) == [Property("a", "12", 2), Property("b", "3", 4)]


def test_escapes() -> None:
    text = r"k = \t\n\r\f|\u00e9|\u20AC|\q\\|\uD83D\uDE00|\#\!"
    assert as_dict(text) == {"k": "\t\n\r\f|é|€|q\\|😀|#!"}


def test_escaped_separators_and_spaces_in_keys() -> None:
    text = "my\\ key\\=x\\:y = v\nother\\ key:w\n\\ lead = 1\n"
    assert as_dict(text) == {"my key=x:y": "v", "other key": "w", " lead": "1"}


def test_escaped_whitespace_keeps_leading_blanks_of_value() -> None:
    assert as_dict("a = \\  b") == {"a": "  b"}


@pytest.mark.parametrize("text", ["a = \\u12", "a = \\uZZZZ", "a = x\\u00g0y"])
def test_malformed_unicode_escape_names_the_line(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_properties("# first\n\n" + text, source="mm2.properties")
    assert info.value.line == 3
    assert info.value.key == "a"
    assert "mm2.properties:3" in str(info.value)
    assert "\\u" in str(info.value)


def test_malformed_unicode_escape_in_key() -> None:
    with pytest.raises(ConfigError) as info:
        parse_properties("ok = 1\nbad\\u00 = 2\n")
    assert info.value.line == 2
    assert "line 2" in str(info.value)


def test_line_is_the_first_physical_line() -> None:
    text = "\n\na = 1\\\n 2\\\n 3\nb = 4\n"
    assert [(p.key, p.line) for p in parse_properties(text)] == [("a", 3), ("b", 6)]


def test_duplicates_are_kept_and_last_wins() -> None:
    entries = parse_properties("a = 1\nb = 2\na = 3\na = 4\n")
    assert [p.value for p in entries if p.key == "a"] == ["1", "3", "4"]
    assert last_wins(entries)["a"] == Property("a", "4", 4)
    assert [(old.line, new.line) for old, new in duplicates(entries)] == [(1, 3), (3, 4)]


def test_no_duplicates() -> None:
    assert duplicates(parse_properties("a=1\nb=2")) == []


def _java_escape(text: str, *, is_key: bool) -> str:
    """What `Properties.store` writes (saveConvert), used to round-trip arbitrary strings."""
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (i == 0 or is_key):
            out.append("\\ ")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!\\":
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.extend(f"\\u{unit:04X}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=30)


@given(key=_TEXT.filter(bool), value=_TEXT)
def test_round_trip_with_java_store_escaping(key: str, value: str) -> None:
    line = f"{_java_escape(key, is_key=True)}={_java_escape(value, is_key=False)}"
    assert parse_properties(line) == [Property(key, value, 1)]


@given(st.text(min_size=1).filter(lambda k: k.strip() == k and k != ""), st.text())
def test_format_property_round_trips(key: str, value: str) -> None:
    from mirrorline.core.properties import format_property

    parsed = parse_properties(format_property(key, value))
    assert [(p.key, p.value) for p in parsed] == [(key, value)]
