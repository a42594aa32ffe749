"""Every audit verdict of the target clusters, for `admin audit` and the metrics.

Loaded at start from each target's audit topic (so verdicts judged by an earlier run are
served too) and kept current by the audit apps. Keyed like the topic: a verdict written
twice for one window is one verdict. A record of the audit topic that is not a verdict
(written by someone else) is reported once with topic, partition and offset and skipped.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

_FIELDS = ("flow", "topic", "partition", "window_start_ms", "window_end_ms", "verdict",
           "count", "source_count", "target_count", "reason", "judged_ms")


def parse_verdict(key: bytes | None, value: bytes | None) -> tuple[str, dict[str, Any]]:
    """Key and verdict of one audit-topic record; ValueError when it is not one."""
    if key is None or value is None:
        raise ValueError("null key or value")
    data = json.loads(value)
    if not isinstance(data, dict) or any(f not in data for f in _FIELDS):
        raise ValueError("not an audit verdict")
    return key.decode(), data


class VerdictStore:
    def __init__(self) -> None:
        self.verdicts: dict[str, dict[str, Any]] = {}
        self.new_by_verdict: Counter[tuple[str, str]] = Counter()

    def add(self, key: str, value: dict[str, Any]) -> None:
        """A verdict; one given again for its window (a MISSING window whose records came
        after all, now LATE) replaces the earlier one."""
        old = self.verdicts.get(key)
        if old is None or old["verdict"] != value["verdict"]:
            self.new_by_verdict[(value["flow"], value["verdict"])] += 1
        self.verdicts[key] = value

    def load(self, topic: str, records: Iterable[Any]) -> None:
        for record in records:
            try:
                key, value = parse_verdict(record.key, record.value)
            except (ValueError, UnicodeDecodeError) as exc:
                log.warning("skipping malformed record in audit topic %s partition %d offset "
                            "%d: %s", topic, record.partition, record.offset, exc)
                continue
            self.verdicts[key] = value

    def query(self, flow: str, topic: str = "", since_ms: int = 0) -> list[dict[str, Any]]:
        found = [v for v in self.verdicts.values()
                 if v["flow"] == flow and (not topic or v["topic"] == topic)
                 and v["window_start_ms"] >= since_ms]
        return sorted(found, key=lambda v: (v["window_start_ms"], v["topic"], v["partition"]))

    def totals(self, flow: str) -> tuple[Counter[str], int, int]:
        by_verdict: Counter[str] = Counter()
        missing = duplicated = 0
        for v in self.verdicts.values():
            if v["flow"] != flow:
                continue
            by_verdict[v["verdict"]] += 1
            if v["verdict"] == "MISSING":
                missing += int(v["count"])
            elif v["verdict"] == "DUPLICATED":
                duplicated += int(v["count"])
        return by_verdict, missing, duplicated
