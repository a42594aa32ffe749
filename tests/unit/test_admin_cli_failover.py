"""`mirrorline admin offsets|failover|failback`: the reports rendered and the requests built.

Pure, like tests/unit/test_admin_cli.py: messages in, text out; arguments in, requests out.
"""

from __future__ import annotations

import argparse
from typing import Any, cast

import pytest
from admin_cli_text import columns, parse

from mirrorline.cli import main
from mirrorline.cli.admin_args import (
    RequestError,
    build_execute_failback_request,
    build_execute_failover_request,
    build_failover_to_time_request,
    build_plan_failback_request,
    build_plan_failover_request,
    build_translate_request,
    call_deadline,
    parse_time,
)
from mirrorline.cli.admin_format import (
    to_dict,
)
from mirrorline.cli.admin_format_failover import (
    format_failback_plan,
    format_failback_result,
    format_failover_plan,
    format_failover_result,
    format_translate,
    format_translations,
)
from mirrorline.v1 import failover_pb2

# --------------------------------------------------------------------------- failover output

TRANSLATION_HEADER = ["TOPIC", "PARTITION", "TARGET TOPIC", "SOURCE OFFSET", "TARGET OFFSET",
                      "EXACT", "MAX DUPLICATES", "BASIS"]


def translations() -> list[failover_pb2.OffsetTranslation]:
    return [
        failover_pb2.OffsetTranslation(
            topic="orders", partition=1, target_topic="primary.orders", source_offset=-1,
            target_offset=-1, exact=False, max_duplicates=-1, basis="no committed offset"),
        failover_pb2.OffsetTranslation(
            topic="orders", partition=0, target_topic="primary.orders", source_offset=1200,
            target_offset=1180, exact=False, max_duplicates=12, basis="offset sync"),
        failover_pb2.OffsetTranslation(
            topic="audit", partition=0, target_topic="primary.audit", source_offset=7,
            target_offset=7, exact=True, max_duplicates=0, basis="offset map"),
    ]


def test_translate_table_sorted_with_unknown_offsets_as_question_marks() -> None:
    text = format_translate(failover_pb2.TranslateOffsetsResponse(
        flow="primary->backup", group="billing", partitions=translations()))
    header, table = text.split("\n\n")
    assert header == "flow primary->backup, group billing"
    lines = table.splitlines()
    assert columns(lines[0]) == TRANSLATION_HEADER
    assert columns(lines[1]) == ["audit", "0", "primary.audit", "7", "7", "yes", "0",
                                 "offset map"]
    assert columns(lines[2]) == ["orders", "0", "primary.orders", "1200", "1180", "no", "12",
                                 "offset sync"]
    assert columns(lines[3]) == ["orders", "1", "primary.orders", "?", "?", "no", "?",
                                 "no committed offset"]
    assert len(lines) == 4


def test_translate_without_partitions() -> None:
    assert format_translations([]) == "no partitions"
    assert format_translate(failover_pb2.TranslateOffsetsResponse(
        flow="a->b", group="g")).endswith("\n\nno partitions")


def failover_plan(*, safe: bool) -> failover_pb2.FailoverPlan:
    return failover_pb2.FailoverPlan(
        flow="primary->backup", safe=safe, replication_lag_records=150 if not safe else 0,
        replication_lag_ms=1234.4 if not safe else 0.0, source_reachable=True,
        groups=[
            failover_pb2.GroupReadiness(
                group="billing", safe=safe,
                reasons=[] if safe else ["150 records not mirrored yet",
                                         "2 members are active on the target"],
                expected_duplicates=12, records_not_mirrored=150 if not safe else 0,
                checkpoint_age_ms=4_200, active_members_on_target=0 if safe else 2,
                partitions=translations()),
            failover_pb2.GroupReadiness(group="audit", safe=True, checkpoint_age_ms=-1,
                                        expected_duplicates=-1),
        ])


def test_failover_plan_that_is_not_safe_says_so_first() -> None:
    text = format_failover_plan(failover_plan(safe=False))
    blocks = text.split("\n\n")
    assert blocks[0] == "NOT SAFE to fail over flow primary->backup (groups: billing)"
    assert blocks[1] == ("flow primary->backup  safe: NO  replication lag: 150 records, "
                         "max 1234 ms  source reachable: yes")
    billing = blocks[2].splitlines()
    assert billing[0] == "group billing: NOT SAFE"
    assert [columns(line) for line in billing[1:5]] == [
        ["expected duplicates:", "12"], ["records not mirrored:", "150"],
        ["checkpoint age:", "4.2s"], ["active members on target:", "2"]]
    assert billing[5:] == ["  reasons:", "    - 150 records not mirrored yet",
                           "    - 2 members are active on the target"]
    partitions = blocks[3].splitlines()
    assert columns(partitions[0]) == TRANSLATION_HEADER
    assert columns(partitions[3]) == ["orders", "1", "primary.orders", "?", "?", "no", "?",
                                      "no committed offset"]
    audit = blocks[4].splitlines()
    assert audit[0] == "group audit: SAFE"
    assert columns(audit[1]) == ["expected duplicates:", "?"]
    assert columns(audit[3]) == ["checkpoint age:", "none"]
    assert "reasons" not in blocks[4]
    assert blocks[5] == "no partitions"


def test_failover_plan_that_is_safe() -> None:
    text = format_failover_plan(failover_plan(safe=True))
    assert "NOT SAFE" not in text
    assert text.startswith("flow primary->backup  safe: YES  replication lag: 0 records, "
                           "max 0 ms  source reachable: yes\n\ngroup billing: SAFE\n")


def test_failover_plan_with_an_unreachable_source_and_unknown_lag() -> None:
    text = format_failover_plan(failover_pb2.FailoverPlan(
        flow="a->b", safe=False, replication_lag_records=-1, replication_lag_ms=-1))
    assert text.splitlines() == [
        "NOT SAFE to fail over flow a->b", "",
        "flow a->b  safe: NO  replication lag: ? records, max ? ms  source reachable: no", "",
        "no groups"]


def test_a_group_not_safe_without_reasons_says_so() -> None:
    text = format_failover_plan(failover_pb2.FailoverPlan(
        flow="a->b", groups=[failover_pb2.GroupReadiness(group="g")]))
    assert "group g: NOT SAFE\n" in text
    assert "  reasons: none given" in text


def test_failover_result_lists_committed_offsets_sorted() -> None:
    result = failover_pb2.FailoverResult(flow="primary->backup", warnings=["not exact"],
                                         committed=[
        failover_pb2.CommittedOffset(group="web", target_topic="primary.orders", partition=0,
                                     offset=-1, exact=False, max_duplicates=-1,
                                     basis="no checkpoint"),
        failover_pb2.CommittedOffset(group="billing", target_topic="primary.orders",
                                     partition=1, offset=1180, exact=False, max_duplicates=12,
                                     basis="offset sync"),
        failover_pb2.CommittedOffset(group="billing", target_topic="primary.orders",
                                     partition=0, offset=40, exact=True, basis="offset map"),
    ])
    header, table = format_failover_result(result).split("\n\n")
    assert header == "flow primary->backup: offsets committed on the target"
    lines = table.splitlines()
    assert columns(lines[0]) == ["GROUP", "TARGET TOPIC", "PARTITION", "OFFSET", "EXACT",
                                 "MAX DUPLICATES", "BASIS"]
    assert columns(lines[1]) == ["billing", "primary.orders", "0", "40", "yes", "0",
                                 "offset map"]
    assert columns(lines[2]) == ["billing", "primary.orders", "1", "1180", "no", "12",
                                 "offset sync"]
    assert columns(lines[3]) == ["web", "primary.orders", "0", "?", "no", "?",
                                 "no checkpoint"]
    assert "not exact" not in table  # warnings go to stderr


def test_failover_result_of_to_time_names_the_time_in_utc() -> None:
    result = failover_pb2.FailoverResult(flow="a->b", committed=[
        failover_pb2.CommittedOffset(group="g", target_topic="t", offset=5, exact=True)])
    header = format_failover_result(result, at_ms=1_795_233_780_000).split("\n\n")[0]
    assert header == "flow a->b: offsets committed on the target for 2026-11-21T04:03:00Z"
    assert format_failover_result(failover_pb2.FailoverResult(flow="a->b"),
                                  at_ms=1_795_233_780_250) == (
        "flow a->b: no offsets committed for 2026-11-21T04:03:00.250Z")


def failback_plan(**kwargs: Any) -> failover_pb2.FailbackPlan:
    return failover_pb2.FailbackPlan(flow="primary->backup", reverse_flow="backup->primary",
                                     **kwargs)


def test_failback_plan_report() -> None:
    text = format_failback_plan(failback_plan(
        reverse_exists=False,
        diverged=[
            failover_pb2.DivergedPartition(topic="orders", partition=1, old_primary_end=-1,
                                           mirrored_next=500, diverged_records=-1),
            failover_pb2.DivergedPartition(topic="orders", partition=0, old_primary_end=1300,
                                           mirrored_next=1200, diverged_records=100),
        ],
        groups_on_old_primary=["billing", "web"], notes=["the old primary was written to"],
        confirm="scrape-primary"))
    blocks = text.split("\n\n")
    assert [columns(line) for line in blocks[0].splitlines()] == [
        ["flow:", "primary->backup"], ["reverse flow:", "backup->primary (does not exist yet)"]]
    diverged = blocks[1].splitlines()
    assert diverged[0].startswith("diverged partitions")
    assert columns(diverged[1]) == ["TOPIC", "PARTITION", "OLD PRIMARY END", "MIRRORED NEXT",
                                    "DIVERGED RECORDS"]
    assert columns(diverged[2]) == ["orders", "0", "1300", "1200", "100"]
    assert columns(diverged[3]) == ["orders", "1", "?", "500", "?"]
    assert blocks[2].splitlines() == ["groups with offsets on the old primary:", "  - billing",
                                      "  - web"]
    assert blocks[3].splitlines() == ["notes:", "  - the old primary was written to"]
    # The flow name is quoted: unquoted, the shell would take `>` for a redirection.
    assert blocks[4] == ("to scrape, run: mirrorline admin failback execute "
                         "'primary->backup' --scrape --confirm scrape-primary")
    assert len(blocks) == 5


def test_failback_plan_quotes_a_confirmation_text_with_blanks() -> None:
    text = format_failback_plan(failback_plan(confirm="scrape primary's data"))
    assert text.splitlines()[-1] == (
        "to scrape, run: mirrorline admin failback execute 'primary->backup' --scrape "
        """--confirm 'scrape primary'"'"'s data'""")


def test_failback_plan_with_nothing_diverged_and_no_scrape_offered() -> None:
    text = format_failback_plan(failback_plan(reverse_exists=True))
    assert "reverse flow:  backup->primary (exists)" in text
    assert "diverged partitions: none" in text
    assert "groups with offsets on the old primary: none" in text
    assert "notes" not in text
    assert "to scrape" not in text


def test_failback_result() -> None:
    text = format_failback_result(failover_pb2.FailbackResult(
        reverse_flow="backup->primary", created=True, scraped_topics=["orders", "audit"],
        deleted_groups=["billing"], warnings=["x"]))
    assert [columns(line) for line in text.splitlines()] == [
        ["reverse flow:", "backup->primary (created)"],
        ["scraped topics:", "orders, audit"], ["deleted groups:", "billing"]]
    text = format_failback_result(failover_pb2.FailbackResult(reverse_flow="backup->primary"))
    assert [columns(line) for line in text.splitlines()] == [
        ["reverse flow:", "backup->primary (already existed, not created)"],
        ["scraped topics:", "none"], ["deleted groups:", "none"]]


def test_json_of_a_failover_plan() -> None:
    document = to_dict(failover_plan(safe=False))
    assert document["safe"] is False
    assert document["replication_lag_records"] == "150"
    audit = cast(list[dict[str, object]], document["groups"])[1]
    assert audit["checkpoint_age_ms"] == "-1"  # raw values, not "?"
    assert audit["reasons"] == []


# --------------------------------------------------------------------------- failover requests


def test_translate_request() -> None:
    args = parse("offsets", "translate", " primary -> backup ", "--group", "billing")
    assert build_translate_request(args) == failover_pb2.TranslateOffsetsRequest(
        flow="primary->backup", group="billing")


def test_plan_failover_request_takes_repeated_groups_once_each_in_order() -> None:
    args = parse("failover", "plan", "a->b", "--group", "web", "--group", "billing",
                 "--group", "web")
    assert build_plan_failover_request(args) == failover_pb2.PlanFailoverRequest(
        flow="a->b", groups=["web", "billing"])


@pytest.mark.parametrize(("mode", "value"), [
    ("drain", failover_pb2.FAILOVER_MODE_DRAIN), ("now", failover_pb2.FAILOVER_MODE_NOW),
])
def test_execute_failover_request_modes(mode: str,
                                        value: failover_pb2.FailoverMode.ValueType) -> None:
    args = parse("failover", "execute", "a->b", "--group", "g1", "--group", "g2",
                 "--mode", mode)
    assert build_execute_failover_request(args) == failover_pb2.ExecuteFailoverRequest(
        flow="a->b", groups=["g1", "g2"], mode=value, drain_timeout_ms=0)


def test_execute_failover_request_with_a_drain_timeout() -> None:
    args = parse("failover", "execute", "a->b", "--group", "g", "--mode", "drain",
                 "--drain-timeout", "90.5")
    request = build_execute_failover_request(args)
    assert request.drain_timeout_ms == 90_500
    assert request.mode == failover_pb2.FAILOVER_MODE_DRAIN


@pytest.mark.parametrize(("argv", "deadline"), [
    (["--mode", "drain"], 90.0),                                   # the server's 60 s + 30
    (["--mode", "drain", "--drain-timeout", "5"], 35.0),
    (["--mode", "drain", "--drain-timeout", "600"], 630.0),
    (["--mode", "drain", "--drain-timeout", "5", "--timeout", "120"], 120.0),
    (["--mode", "now"], 10.0),
    (["--mode", "now", "--timeout", "3"], 3.0),
])
def test_the_deadline_of_execute_covers_the_drain(argv: list[str], deadline: float) -> None:
    assert call_deadline(parse("failover", "execute", "a->b", "--group", "g", *argv)) \
        == deadline


def test_other_commands_use_the_timeout_as_deadline() -> None:
    assert call_deadline(parse("failover", "plan", "a->b", "--group", "g")) == 10.0
    assert call_deadline(parse("--timeout", "4", "failback", "plan", "a->b")) == 4.0
    assert call_deadline(parse("flows", "list")) == 10.0


@pytest.mark.parametrize(("text", "ms"), [
    ("1795233780000", 1_795_233_780_000),
    (" 1795233780000 ", 1_795_233_780_000),
    ("0", 0),
    ("2026-11-21T04:03:00Z", 1_795_233_780_000),
    ("2026-11-21 04:03:00+02:00", 1_795_233_780_000 - 2 * 3_600_000),
    ("2026-11-21T04:03:00.250-01:30", 1_795_233_780_250 + 90 * 60_000),
    ("2026-11-21T04:03Z", 1_795_233_780_000),
    ("1970-01-01T00:00:00Z", 0),
])
def test_parse_time(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize(("text", "message"), [
    ("2026-11-21T04:03:00", "has no time zone"),
    ("2026-11-21 04:03:00", "has no time zone"),
    ("2026-11-21", "has no time zone"),
    ("1795233780", "looks like epoch seconds"),
    ("1795233780000000", "past the year 5000"),
    ("1969-12-31T23:59:59Z", "before 1970"),
    ("-5", "is not a time"),
    ("yesterday", "is not a time"),
    ("", "is not a time"),
    ("2026-13-01T00:00:00Z", "is not a time"),
])
def test_parse_time_rejections(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_time(text)


def test_a_time_without_zone_is_an_argparse_error_asking_for_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "failover", "to-time", "a->b",
              "--group", "g", "--time", "2026-11-21T04:03:00"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "mirrorline admin failover to-time: error: argument --time:" in err
    assert "has no time zone: add one, e.g. 2026-11-21T04:03:00Z for UTC" in err


@pytest.mark.parametrize("time", ["1795233780000", "2026-11-21T04:03:00Z",
                                  "2026-11-21T06:03:00+02:00"])
def test_failover_to_time_request(time: str) -> None:
    args = parse("failover", "to-time", "a->b", "--group", "g", "--group", "h",
                 "--time", time)
    assert build_failover_to_time_request(args) == failover_pb2.FailoverToTimeRequest(
        flow="a->b", groups=["g", "h"], timestamp_ms=1_795_233_780_000)


def test_failback_requests() -> None:
    assert build_plan_failback_request(parse("failback", "plan", "primary->backup")) == \
        failover_pb2.PlanFailbackRequest(flow="primary->backup")
    assert build_execute_failback_request(parse("failback", "execute", "a->b")) == \
        failover_pb2.ExecuteFailbackRequest(flow="a->b")
    args = parse("failback", "execute", "a->b", "--scrape", "--confirm", "scrape a",
                 "--topic", "orders", "--topic", "audit", "--topic", "orders")
    assert build_execute_failback_request(args) == failover_pb2.ExecuteFailbackRequest(
        flow="a->b", scrape=True, confirm="scrape a", topics=["orders", "audit"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--scrape"], "--scrape needs --confirm TEXT"),
    (["--scrape", "--topic", "t"], "--scrape needs --confirm TEXT"),
    (["--confirm", "x"], "--confirm only applies with --scrape"),
    (["--topic", "t"], "--topic only applies with --scrape"),
])
def test_failback_execute_argument_errors_exit_2(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RequestError, match=message):
        build_execute_failback_request(parse("failback", "execute", "a->b", *argv))
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", "failback", "execute", "a->b", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "mirrorline admin failback execute: error:" in err
    assert message in err


@pytest.mark.parametrize(("argv", "message"), [
    (["failover", "execute", "a->b", "--group", "g"],
     "the following arguments are required: --mode"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "fast"],
     "argument --mode: invalid choice: 'fast'"),
    (["failover", "execute", "a->b", "--mode", "now"],
     "the following arguments are required: --group"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "now", "--drain-timeout", "5"],
     "--drain-timeout only applies with --mode drain"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "drain",
      "--drain-timeout", "3000000"], "--drain-timeout is at most 2147483 seconds"),
    (["failover", "execute", "a->b", "--group", "g", "--mode", "drain",
      "--drain-timeout", "0"], "must be a positive number of seconds"),
    (["failover", "plan", "a->b"], "the following arguments are required: --group"),
    (["failover", "plan", "a->b", "--group", " "], "the group is empty"),
    (["failover", "to-time", "a->b", "--group", "g"],
     "the following arguments are required: --time"),
    (["offsets", "translate", "a->b"], "the following arguments are required: --group"),
    (["offsets", "translate", "a", "--group", "g"], "is not a flow name"),
    (["failback", "plan"], "the following arguments are required: FLOW"),
    (["failback", "execute", "a->b", "--scrape", "--confirm", ""],
     "the confirmation text is empty"),
])
def test_failover_argument_errors_exit_2(argv: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["admin", "--server", "127.0.0.1:1", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_new_command_groups_alone_print_help_and_return_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["admin", "offsets"]) == 2
    assert main(["admin", "failover"]) == 2
    assert main(["admin", "failback"]) == 2
    err = capsys.readouterr().err
    assert "usage: mirrorline admin failover" in err
    assert "to-time" in err and "execute" in err
