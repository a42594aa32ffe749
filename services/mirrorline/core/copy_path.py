"""Which path a partition's records take, under `mirrorline.batch.path`, from its batches.

The batch path forwards each source batch in a produce of its own (a broker takes one
batch per partition per produce request), so what one round trip carries for a partition
is one source batch. Where producers send large batches that is the cheapest copy there
is. Where they send tiny ones (no linger: one record per batch) it would turn every source
record into a produce of its own, so `auto` re-batches such a partition's records through
the record path, which fills batches of the target producer's `batch.size`.

`PathChooser` keeps a moving average of the record count and size of a partition's
source batches (over about the last `WINDOW` batches) and decides with hysteresis, so a
partition near the threshold does not flip at every fetch: it takes the batch path once
its batches average `MIN_RECORDS` records or `MIN_BYTES` bytes, and leaves it when they
fall under half of both.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["MIN_BYTES", "MIN_RECORDS", "WINDOW", "PathChooser"]

#: Source batches this large (records or bytes, on average) are copied as they are.
MIN_RECORDS = 32
MIN_BYTES = 8192
#: Batches the moving average spans, roughly.
WINDOW = 16

Mode = Literal["auto", "on", "off"]


def _size(nbytes: float) -> str:
    return f"{nbytes / 1024:.0f} KiB" if nbytes >= 10 * 1024 else f"{nbytes:.0f} B"


class PathChooser:
    """One partition's choice between copying its batches as they are and re-batching."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self._records: float | None = None
        self._bytes = 0.0
        self._batches = mode != "off"

    def observe(self, record_count: int, size: int) -> None:
        """A source batch of `record_count` records taking `size` bytes was fetched."""
        if self._records is None:
            self._records, self._bytes = float(record_count), float(size)
        else:
            self._records += (record_count - self._records) / WINDOW
            self._bytes += (size - self._bytes) / WINDOW
        if self.mode != "auto":
            return
        if self._batches:
            self._batches = (self._records >= MIN_RECORDS / 2 or self._bytes >= MIN_BYTES / 2)
        else:
            self._batches = self._records >= MIN_RECORDS or self._bytes >= MIN_BYTES

    @property
    def batches(self) -> bool:
        """Whether batches go as they are (those the target takes as they are)."""
        return self._batches

    @property
    def reason(self) -> str:
        """Why, in the words `admin status` shows."""
        if self.mode != "auto":
            return f"mirrorline.batch.path = {self.mode}"
        if self._records is None:
            return "no source batch seen yet"
        seen = f"source batches average {self._records:.1f} records, {_size(self._bytes)}"
        if self._batches:
            return seen
        return (f"{seen}: re-batched (batches go as they are from {MIN_RECORDS} records or "
                f"{_size(MIN_BYTES)} on average)")
