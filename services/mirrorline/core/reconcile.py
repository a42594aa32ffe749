"""What the controller should append next, given what is and what should be (pure).

Inputs: the replayed control state, the partitions discovery says each flow should copy
(with their remote topic names), the workers whose lease is alive and what each last
reported (the control-log offset it has acted on, the partitions it runs, its load).

Hand-over is fenced: a partition moves only after its old owner has let go. The old
owner either confirmed the release (its report, as of an offset at or after the revoke,
no longer lists the partition, and it has made its progress durable before reporting),
or its lease expired, and a worker whose lease ran out has already stopped by itself.
So no two workers ever copy the same partition at once; the new owner resumes from the
progress the old one recorded.

A move therefore spans rounds: revoke now, grant once released. The round that decided the
move names the new owner (`Plan.moving`); the caller hands that back as `destined`, and the
released partition goes there -- not to whichever worker looks least loaded by then. Placing
it afresh would let a partition taken from one survivor for a newly joined worker land on
another survivor instead (measured loads shift while the moves are under way), so more
would move than had to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from mirrorline.core.assignment import PartitionKey, assign
from mirrorline.core.control import ControlState


@dataclass(frozen=True)
class WorkerReport:
    applied_offset: int
    owned: frozenset[PartitionKey]


@dataclass
class Plan:
    expire: list[str] = field(default_factory=list)
    #: (flow, worker) -> partitions to take away (key -> remote topic)
    revoke: dict[tuple[str, str], dict[PartitionKey, str]] = field(default_factory=dict)
    #: (flow, worker) -> partitions to give (key -> remote topic)
    grant: dict[tuple[str, str], dict[PartitionKey, str]] = field(default_factory=dict)
    #: Partitions revoked to move them: key -> the worker they are meant for.
    moving: dict[PartitionKey, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.expire or self.revoke or self.grant)


def released(state: ControlState, reports: Mapping[str, WorkerReport]) -> set[PartitionKey]:
    """Revoked partitions whose old owner has confirmed letting go: its report, as of an
    offset at or after the revoke, no longer lists them."""
    out: set[PartitionKey] = set()
    for key, was in state.revoking.items():
        report = reports.get(was.worker_id)
        if (report is not None and report.applied_offset >= was.offset
                and key not in report.owned):
            out.add(key)
    return out


def let_go(state: ControlState, reports: Mapping[str, WorkerReport],
           desired: Mapping[PartitionKey, str]) -> set[PartitionKey]:
    """Released partitions nobody should copy any more (their topic left the flow's
    filter, or the topic is gone): done with, not "moving" anywhere. They stay in the
    state's revoking table -- granted again if the filter takes them back -- but status
    must not report them as a hand-over under way."""
    return {k for k in released(state, reports) if k not in desired}


def plan(state: ControlState, desired: Mapping[PartitionKey, str], live: Collection[str],
         reports: Mapping[str, WorkerReport], loads: Mapping[PartitionKey, float], *,
         expired: Collection[str], allow_moves: bool,
         destined: Mapping[PartitionKey, str] | None = None,
         receivers: Collection[str] | None = None,
         spark: Collection[str] = (), on_spark: Collection[PartitionKey] = (),
         spark_unable: Collection[str] = ()) -> Plan:
    """The next step towards `desired`; call again after its events are applied.

    `destined`: the `moving` of earlier plans; a released partition goes to the worker it was
    meant for while that worker lives. `receivers`: the only workers moves may go to (see
    `assign`).

    `spark`: the live workers that are Spark executors; `on_spark`: the partitions that
    should run on one of them (`mirrorline.core.offload`). Every other partition goes to
    the replicator workers; when one pool is empty, the other takes its partitions. A
    partition changing pool moves like any other: released first, granted afterwards.
    `spark_unable`: Spark executors that may not take partitions now (their query failed);
    their partitions go back to the workers.
    """
    result = Plan()
    live = set(live)
    holding = state.workers()
    result.expire = sorted(w for w in expired if w in holding and w not in live)
    gone = set(result.expire)

    # Partitions whose release is still outstanding may not be handed to anyone.
    done = released(state, reports)
    pending = {key for key, was in state.revoking.items()
               if was.worker_id not in gone and key not in done}

    owners = {k: o for k, o in state.owners.items() if o.worker_id not in gone}
    revoke: dict[tuple[str, str], dict[PartitionKey, str]] = defaultdict(dict)
    # Partitions nobody should copy any more, or whose remote topic changed (policy).
    for key, owner in owners.items():
        if desired.get(key) != owner.remote_topic and owner.worker_id in live:
            revoke[(key.flow, owner.worker_id)][key] = owner.remote_topic
    stale = {k for pairs in revoke.values() for k in pairs}

    assignable = [k for k in desired if k not in pending and k not in stale]
    if not live:
        result.revoke = dict(revoke)
        return result
    live_owner = {k: owners[k].worker_id for k in assignable
                  if k in owners and owners[k].worker_id in live}
    # Partitions held by a worker that is neither live nor expired yet stay where they
    # are: its lease decides, not this round.
    held_elsewhere = {k for k in assignable if k in owners and owners[k].worker_id not in live}
    spark_pool = live & set(spark)
    worker_pool = live - spark_pool
    spark_pool -= set(spark_unable)
    wanted_on_spark = set(on_spark) if spark_pool else set()
    if not worker_pool:  # no replicator worker: whatever Spark can take, it takes
        wanted_on_spark = set(assignable)
    grant: dict[tuple[str, str], dict[PartitionKey, str]] = defaultdict(dict)
    for pool, keys in ((spark_pool, [k for k in assignable if k in wanted_on_spark]),
                       (worker_pool, [k for k in assignable if k not in wanted_on_spark])):
        if not pool:
            continue
        current = {k: live_owner[k] for k in keys if live_owner.get(k) in pool}
        # A released partition that was moved for a reason goes where that reason sent it.
        sticky = dict(current)
        sticky.update({k: w for k, w in (destined or {}).items()
                       if w in pool and k in keys and k not in owners})
        target = assign(sticky, [k for k in keys if k not in held_elsewhere], pool, loads,
                        allow_moves=allow_moves,
                        receivers=None if receivers is None else set(receivers) & pool)
        for key, worker in target.items():
            previous = live_owner.get(key)
            if previous is None:
                grant[(key.flow, worker)][key] = desired[key]
            elif previous != worker:  # a move: release first, grant in a later round
                revoke[(key.flow, previous)][key] = owners[key].remote_topic
                result.moving[key] = worker
    result.revoke = dict(revoke)
    result.grant = dict(grant)
    return result
