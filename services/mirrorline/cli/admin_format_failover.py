"""Rendering of the failover reports for `mirrorline admin`: offset translations, failover
and failback plans and results. Pure functions, message -> text.

Kept apart from the flow and status tables (`mirrorline.cli.admin_format`, whose cell
conventions these share: ``?`` unknown, ``-`` nothing to show) because these reports are
read at the worst moment -- during an incident -- and have their own shape: blocks of
``key: value`` lines and tables separated by blank lines, with the verdicts of a failover
plan shown as ``SAFE`` and ``NOT SAFE`` (flow: ``safe: YES``/``safe: NO``) so that a
refusal stands out. Warnings of results are not part of them (the caller prints them on
stderr).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from mirrorline.cli.admin_format import (
    NONE,
    format_age,
    format_count,
    format_millis,
    format_utc,
    one_line,
    render_table,
)
from mirrorline.v1 import failover_pb2

__all__ = [
    "format_failback_plan",
    "format_failback_result",
    "format_failover_plan",
    "format_failover_result",
    "format_translate",
    "format_translations",
    "quote_argument",
]


# --------------------------------------------------------------------------- offsets


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def format_translations(partitions: Iterable[failover_pb2.OffsetTranslation]) -> str:
    """One line per partition of a group, sorted by topic and partition; ``?`` for an offset
    the server reports as -1 (no committed offset, no translation possible)."""
    ordered = sorted(partitions, key=lambda p: (p.topic, p.partition))
    if not ordered:
        return "no partitions"
    return render_table(
        ("TOPIC", "PARTITION", "TARGET TOPIC", "SOURCE OFFSET", "TARGET OFFSET", "EXACT",
         "MAX DUPLICATES", "BASIS"),
        ((p.topic, str(p.partition), p.target_topic or NONE, format_count(p.source_offset),
          format_count(p.target_offset), _yes_no(p.exact), format_count(p.max_duplicates),
          one_line(p.basis)) for p in ordered),
        right=(1, 3, 4, 6))


def format_translate(response: failover_pb2.TranslateOffsetsResponse) -> str:
    """`offsets translate`: a header line, then the partitions."""
    return (f"flow {response.flow}, group {response.group}\n\n"
            + format_translations(response.partitions))


# --------------------------------------------------------------------------- failover


def _key_values(fields: Sequence[tuple[str, str]], indent: str = "") -> list[str]:
    width = max(len(key) for key, _ in fields) + 1
    return [f"{indent}{(key + ':').ljust(width)}  {value}" for key, value in fields]


def _checkpoint_age(age_ms: int) -> str:
    return "none" if age_ms < 0 else format_age(age_ms)


def _bullets(items: Iterable[str], indent: str = "  ") -> list[str]:
    return [f"{indent}- {one_line(item)}" for item in items]


def _group_readiness(group: failover_pb2.GroupReadiness) -> str:
    lines = [f"group {group.group}: {'SAFE' if group.safe else 'NOT SAFE'}"]
    lines += _key_values((
        ("expected duplicates", format_count(group.expected_duplicates)),
        ("records not mirrored", format_count(group.records_not_mirrored)),
        ("checkpoint age", _checkpoint_age(group.checkpoint_age_ms)),
        ("active members on target", str(group.active_members_on_target)),
    ), indent="  ")
    if group.reasons:
        lines.append("  reasons:")
        lines += _bullets(group.reasons, indent="    ")
    elif not group.safe:
        lines.append("  reasons: none given")
    return "\n".join(lines) + "\n\n" + format_translations(group.partitions)


def format_failover_plan(plan: failover_pb2.FailoverPlan) -> str:
    """`failover plan`: the flow line, then each group (in the server's order) with its
    verdict, figures, reasons and partitions. A plan that is not safe starts with a
    ``NOT SAFE`` banner naming the groups concerned."""
    blocks = []
    if not plan.safe:
        unsafe = [g.group for g in plan.groups if not g.safe]
        concerned = f" (groups: {', '.join(unsafe)})" if unsafe else ""
        blocks.append(f"NOT SAFE to fail over flow {plan.flow}{concerned}")
    blocks.append(
        f"flow {plan.flow}  safe: {'YES' if plan.safe else 'NO'}  "
        f"replication lag: {format_count(plan.replication_lag_records)} records, "
        f"max {format_millis(plan.replication_lag_ms)} ms  "
        f"source reachable: {_yes_no(plan.source_reachable)}")
    if plan.groups:
        blocks += [_group_readiness(group) for group in plan.groups]
    else:
        blocks.append("no groups")
    return "\n\n".join(blocks)


def format_failover_result(result: failover_pb2.FailoverResult, *,
                           at_ms: int | None = None) -> str:
    """`failover execute` and `failover to-time`: the offsets committed on the target,
    sorted by group, topic and partition; `at_ms` (to-time) is echoed in the header, in
    UTC. Warnings are not included (they go to stderr)."""
    at = f" for {format_utc(at_ms)}" if at_ms is not None else ""
    committed = sorted(result.committed, key=lambda c: (c.group, c.target_topic, c.partition))
    if not committed:
        return f"flow {result.flow}: no offsets committed{at}"
    header = f"flow {result.flow}: offsets committed on the target{at}"
    table = render_table(
        ("GROUP", "TARGET TOPIC", "PARTITION", "OFFSET", "EXACT", "MAX DUPLICATES", "BASIS"),
        ((c.group, c.target_topic, str(c.partition), format_count(c.offset), _yes_no(c.exact),
          format_count(c.max_duplicates), one_line(c.basis)) for c in committed),
        right=(2, 3, 5))
    return header + "\n\n" + table


# --------------------------------------------------------------------------- failback


def quote_argument(text: str) -> str:
    """`text` as one POSIX shell word: unchanged when it is safe as it is; quoted when it
    holds a character the shell would interpret (``>`` in ``primary->backup``, blanks)."""
    return shlex.quote(text)


def format_failback_plan(plan: failover_pb2.FailbackPlan) -> str:
    """`failback plan`: the reverse flow, the diverged partitions, the groups with offsets on
    the old primary, the notes and the command that scrapes (with the confirmation text).
    """
    reverse = plan.reverse_flow or NONE
    exists = "exists" if plan.reverse_exists else "does not exist yet"
    blocks = ["\n".join(_key_values((("flow", plan.flow),
                                      ("reverse flow", f"{reverse} ({exists})"))))]

    diverged = sorted(plan.diverged, key=lambda d: (d.topic, d.partition))
    if diverged:
        blocks.append("diverged partitions (written on the old primary, never mirrored):\n"
                      + render_table(
                          ("TOPIC", "PARTITION", "OLD PRIMARY END", "MIRRORED NEXT",
                           "DIVERGED RECORDS"),
                          ((d.topic, str(d.partition), format_count(d.old_primary_end),
                            format_count(d.mirrored_next), format_count(d.diverged_records))
                           for d in diverged),
                          right=(1, 2, 3, 4)))
    else:
        blocks.append("diverged partitions: none")

    if plan.groups_on_old_primary:
        blocks.append("\n".join(["groups with offsets on the old primary:",
                                 *_bullets(plan.groups_on_old_primary)]))
    else:
        blocks.append("groups with offsets on the old primary: none")

    if plan.notes:
        blocks.append("\n".join(["notes:", *_bullets(plan.notes)]))

    if plan.confirm:
        blocks.append(f"to scrape, run: mirrorline admin failback execute "
                      f"{quote_argument(plan.flow)} --scrape --confirm "
                      f"{quote_argument(plan.confirm)}")
    return "\n\n".join(blocks)


def _names(items: Iterable[str]) -> str:
    return ", ".join(items) or "none"


def format_failback_result(result: failover_pb2.FailbackResult) -> str:
    """`failback execute`: the reverse flow (created now or not), what was scraped and which
    groups were deleted. Warnings are not included (they go to stderr)."""
    created = "created" if result.created else "already existed, not created"
    return "\n".join(_key_values((
        ("reverse flow", f"{result.reverse_flow or NONE} ({created})"),
        ("scraped topics", _names(result.scraped_topics)),
        ("deleted groups", _names(result.deleted_groups)),
    )))
