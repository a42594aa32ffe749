"""CPU time of processes and of the whole machine, from /proc (Linux), for the cost figures.

A contender's CPU is the user + system time of its processes and of everything they started:
a process's own `utime + stime`, plus `cutime + cstime` (what its children that it has
already waited for used), plus the same for each child still alive. Read twice, the
difference is what the tree used in between, whether a child ended meanwhile or not.
The machine's busy time is the first line of /proc/stat (every CPU's ticks but idle and
iowait), so "the rest of the machine" -- other processes, the other engineers' tests on a
shared host -- is what the named processes do not account for.

The parsing is pure (text in, numbers out) so that it can be tested without a machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the cost figures need, in clock ticks."""

    ppid: int
    own: int       # utime + stime
    children: int  # cutime + cstime: children already waited for


def parse_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat line. The command name (field 2) may hold spaces and ')'."""
    fields = text.rpartition(")")[2].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
    return ProcStat(ppid=int(fields[1]), own=int(fields[11]) + int(fields[12]),
                    children=int(fields[13]) + int(fields[14]))


def tree_ticks(table: Mapping[int, ProcStat], roots: Iterable[int], *,
               children: bool = True) -> int:
    """Ticks used by `roots` (and, with `children`, by everything below them) in `table`.

    A root missing from `table` (it ended) counts 0. Without `children` a root's own time
    alone counts: what it started is left out, even the children it has waited for.
    """
    if not children:
        return sum(table[pid].own for pid in roots if pid in table)
    below: dict[int, list[int]] = {}
    for pid, stat in table.items():
        below.setdefault(stat.ppid, []).append(pid)
    seen: set[int] = set()
    todo = [pid for pid in roots if pid in table]
    total = 0
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += table[pid].own + table[pid].children
        todo.extend(below.get(pid, ()))
    return total


def parse_machine(text: str) -> tuple[int, int]:
    """(busy, total) ticks of every CPU together, from /proc/stat's first line."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = [int(v) for v in line.split()[1:]]
            # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
            # already inside user (and guest_nice inside nice), so only the first 8 count.
            ticks = ticks[:8]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            return sum(ticks) - idle, sum(ticks)
    raise ValueError("no 'cpu' line in /proc/stat")


def process_table() -> dict[int, ProcStat]:
    """Every process's stat, now (processes that end while it is read are left out)."""
    table: dict[int, ProcStat] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            table[int(entry.name)] = parse_stat(Path(entry.path, "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return table


def machine_ticks() -> tuple[int, int]:
    return parse_machine(Path("/proc/stat").read_text())


@dataclass(frozen=True)
class Group:
    """A named set of processes whose CPU is read: the contender's, the brokers', ...

    `children`: count what they started too (a contender's helpers, Spark's JVM and
    Python workers); off for the bench's own process, whose children are the brokers.
    `reaped_here`: the processes are the bench process's own children and may end within
    the window (kcat's pipes end at the partition's end). An ended process's stat is gone
    once it is waited for, and its time moves into the bench process's `cutime + cstime`;
    so the group's time is what its living processes used since the first sample, plus
    what the bench process's waited-for children gained, minus what those that ended had
    used before the first sample. Right only while no other child of the bench process
    ends within the window (the brokers and the other contenders live on).
    """

    pids: tuple[int, ...]
    children: bool = True
    reaped_here: bool = False


@dataclass(frozen=True)
class Sample:
    """CPU ticks so far of each group's processes (per process), of the bench process's
    waited-for children, and of the machine (busy, total)."""

    groups: tuple[Group, ...]
    ticks: tuple[dict[int, int], ...]
    reaped: int
    busy: int
    total: int

    @staticmethod
    def take(groups: Iterable[Group]) -> Sample:
        table = process_table()
        groups = tuple(groups)
        busy, total = machine_ticks()
        me = table.get(os.getpid())
        return Sample(
            groups,
            tuple({pid: tree_ticks(table, (pid,), children=g.children)
                   for pid in g.pids if pid in table} for g in groups),
            me.children if me is not None else 0, busy, total)


@dataclass(frozen=True)
class Used:
    """CPU seconds each group, and the machine, used between two samples."""

    groups: tuple[float, ...]
    busy: float
    total: float


def used(start: Sample, end: Sample) -> Used:
    """What was used from `start` to `end` (taken with the same groups, which may have
    gained processes meanwhile)."""
    out: list[float] = []
    for group, before, after in zip(end.groups, start.ticks, end.ticks, strict=True):
        ticks = sum(t - before.get(pid, 0) for pid, t in after.items())
        if group.reaped_here:
            ticks += end.reaped - start.reaped
            ticks -= sum(t for pid, t in before.items() if pid not in after)
        out.append(ticks / TICK)
    return Used(tuple(out), (end.busy - start.busy) / TICK, (end.total - start.total) / TICK)


def peak_rss(pids: Iterable[int]) -> int:
    """The sum of the processes' peak resident set sizes (VmHWM), in bytes."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) * 1024
    return total
