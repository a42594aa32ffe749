"""What the heartbeat service's readers report to its faust app, and when.

Idle, each report is a produce, a fetch by the app and a changelog write, so how many
there are is most of what an idle heartbeat service costs (docs/benchmarks.md, idle
cost). The agent's folding is exercised here on a plain dict in place of the faust
table (no app is started, no cluster is needed); the service end to end is
tests/integration/test_heartbeat_service.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mirrorline.heartbeat.audit_app import AuditApp, cadence_s, until_due_s

WINDOW_MS = 60_000
SESSION = 1_700_000_000_000


def _app() -> AuditApp:
    """An AuditApp's agent without faust: its tables are plain dicts."""
    app = AuditApp.__new__(AuditApp)
    app.table = {}  # type: ignore[assignment]
    app.canary_table = {}  # type: ignore[assignment]
    return app


def _records(partition: int, first_sequence: int, count: int) -> list[list[int]]:
    return [[SESSION, first_sequence + i, SESSION + 1000 * (first_sequence + i),
             SESSION + 1000 * (first_sequence + i) + 40 + partition] for i in range(count)]


def test_one_canaries_event_for_every_partition_folds_as_one_event_each_did() -> None:
    """A reader reports the canaries of all its partitions in one event per cadence; the
    table ends as it did with one event per partition (the form a restarted service
    may still find in the events topic, so the agent applies both)."""
    parts = {str(p): {"from": 10 * p, "to": 10 * p + 3, "at": SESSION + 5000,
                      "since": SESSION, "records": _records(p, 1, 3)} for p in range(3)}
    together, apart = _app(), _app()
    asyncio.run(together._apply({"kind": "canaries", "flow": "a->b", "window": WINDOW_MS,
                                 "parts": parts}))
    for partition, data in parts.items():
        asyncio.run(apart._apply({"kind": "canary", "flow": "a->b", "window": WINDOW_MS,
                                  "partition": int(partition), **data}))
    assert together.canary_table == apart.canary_table
    assert sorted(together.canary_table) == ["a->b|0", "a->b|1", "a->b|2"]
    state: Any = together.canary_table["a->b|2"]
    assert state["next"] == 23 and len(state["samples"]) == 3


def test_a_canaries_event_applies_only_where_the_table_stands() -> None:
    """A replayed or stale part of the event changes nothing; the others apply."""
    app = _app()
    first = {"0": {"from": 0, "to": 2, "at": SESSION, "since": SESSION,
                   "records": _records(0, 1, 2)}}
    asyncio.run(app._apply({"kind": "canaries", "flow": "f", "window": WINDOW_MS,
                            "parts": first}))
    again = {**first, "1": {"from": 0, "to": 1, "at": SESSION, "since": SESSION,
                            "records": _records(1, 1, 1)}}
    asyncio.run(app._apply({"kind": "canaries", "flow": "f", "window": WINDOW_MS,
                            "parts": again}))
    state0: Any = app.canary_table["f|0"]
    state1: Any = app.canary_table["f|1"]
    assert state0["next"] == 2 and len(state0["samples"]) == 2  # not folded twice
    assert state1["next"] == 1


@pytest.mark.parametrize("window_ms", [1000, 10_000, 60_000, 3_600_000])
def test_reports_due_together_whenever_each_reader_started(window_ms: int) -> None:
    """The canary reader, both audit readers and the judging round of a flow each keep
    the same cadence; whenever each of them asks, its next report falls on the same
    instant as the others' (so their events share requests), never more than a cadence
    away."""
    cadence = cadence_s(window_ms)
    base = 1_764_000_000.0  # a cadence boundary for every cadence above
    askers = [base + cadence * f for f in (0.0, 0.05, 0.2, 0.5, 0.93, 1.0)]
    due = {round(now + until_due_s(cadence, now), 6) for now in askers[:-1]}
    assert due == {round(base + cadence, 6)}
    for now in askers:
        assert 0 < until_due_s(cadence, now) <= cadence
