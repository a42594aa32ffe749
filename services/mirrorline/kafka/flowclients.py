"""The Kafka clients one flow needs, built from its settings, opened and closed together.

Which client talks to which cluster, with which settings, is decided here and nowhere
else: the data consumer on the source; the data producer on the target, with large
batches; a second producer on the target for bookkeeping (progress, and offset syncs
when they live there), so its small requests never hold up data batches; a producer on
the source for offset syncs when they live there; an admin client per cluster.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.clients import admin_kwargs, consumer_kwargs, producer_kwargs
from mirrorline.kafka.clients import build as _kwargs
from mirrorline.kafka.pipelining import install, max_in_flight

log = logging.getLogger(__name__)

#: Default produce batch size (bytes) when `<target>.producer.batch.size` is not set:
#: large batches are what makes a Python mirror fast; Kafka's 16 KiB default is not.
DEFAULT_BATCH_BYTES = 1 << 20

@dataclass
class FlowClients:
    consumer: AIOKafkaConsumer
    producer: AIOKafkaProducer
    bookkeeping_producer: AIOKafkaProducer
    #: The producer for offset syncs: on the source, or the bookkeeping producer.
    sync_producer: AIOKafkaProducer
    source_admin: ClusterAdmin
    target_admin: ClusterAdmin
    #: For reading internal topics on the target (the progress topic) and its tails.
    target_consumer_kwargs: dict[str, Any]
    #: The data consumer's settings, for reading source ranges beside it.
    source_consumer_kwargs: dict[str, Any]
    #: The data producer's settings, to open a new one after an abort.
    producer_kwargs: dict[str, Any]
    #: Batches of one partition the data producer keeps in flight (`kafka.pipelining`):
    #: `max.in.flight.requests.per.connection` when it is idempotent and not transactional.
    pipelining: int = 1

    @classmethod
    async def open(cls, flow: FlowSettings, worker_id: str, *,
                   transactional_id: str | None = None) -> FlowClients:
        """Create and start every client; on failure, close what was started and raise.

        `transactional_id`: exactly-once mode. The data producer is transactional (it also
        carries the bookkeeping of each round) and the target is read `read_committed`, so
        progress and tails written by aborted transactions are never taken for copies."""
        name = f"{flow.source}->{flow.target}|replicator-{worker_id}"
        started: list[Any] = []
        try:
            source_admin = ClusterAdmin(flow.source, _kwargs(
                admin_kwargs, flow.clients.source_admin, f"{name}|source-admin"))
            await source_admin.start()
            started.append(source_admin)
            target_admin = ClusterAdmin(flow.target, _kwargs(
                admin_kwargs, flow.clients.target_admin, f"{name}|target-admin"))
            await target_admin.start()
            started.append(target_admin)
            ckw = _kwargs(consumer_kwargs, flow.clients.source_consumer, f"{name}|consumer")
            # Partitions are assigned explicitly and positioned by Mirrorline; an offset
            # out of range is handled by the flow, never by a silent client-side reset.
            ckw.update(enable_auto_commit=False, auto_offset_reset="none", group_id=None)
            consumer = AIOKafkaConsumer(**ckw)
            await consumer.start()
            started.append(consumer)
            pkw = _kwargs(producer_kwargs, flow.clients.target_producer, f"{name}|producer")
            pkw.update(batch_sizes(flow.clients.target_producer, pkw))
            if transactional_id is not None:
                pkw.update(transactional_id=transactional_id, enable_idempotence=True,
                           acks="all")
            limit = max_in_flight(flow.clients.target_producer,
                                  idempotent=pkw.get("enable_idempotence",
                                                     pkw.get("acks", "all") == "all"))
            producer, pkw, pipelining = await _start_data_producer(flow, pkw, limit)
            started.append(producer)
            bookkeeping = AIOKafkaProducer(**_kwargs(
                producer_kwargs, flow.clients.target_producer, f"{name}|bookkeeping"))
            await bookkeeping.start()
            started.append(bookkeeping)
            sync_producer = bookkeeping
            if flow.emit_offset_syncs_enabled and flow.offset_syncs_at_source:
                sync_producer = AIOKafkaProducer(**_kwargs(
                    producer_kwargs, flow.clients.source_producer, f"{name}|offset-syncs"))
                await sync_producer.start()
                started.append(sync_producer)
        except BaseException:
            await _close_all(started)
            raise
        target_consumer = _kwargs(consumer_kwargs, flow.clients.target_consumer,
                                  f"{name}|progress-reader")
        if transactional_id is not None:
            target_consumer["isolation_level"] = "read_committed"
        return cls(consumer=consumer, producer=producer, bookkeeping_producer=bookkeeping,
                   sync_producer=sync_producer, source_admin=source_admin,
                   target_admin=target_admin, target_consumer_kwargs=target_consumer,
                   source_consumer_kwargs=ckw, producer_kwargs=pkw, pipelining=pipelining)

    async def reopen_producer(self) -> AIOKafkaProducer:
        """Replace the data producer (after `abort_producer`); raises while the target is
        unreachable."""
        producer = AIOKafkaProducer(**self.producer_kwargs)
        install(producer, self.pipelining)
        try:
            await producer.start()
        except BaseException:
            await _close_all([producer])
            raise
        self.producer = producer
        return producer

    async def close(self) -> None:
        await _close_all([self.consumer, self.producer, self.bookkeeping_producer,
                          self.sync_producer, self.source_admin, self.target_admin])


def idempotent_by_default(java: Mapping[str, str], kwargs: Mapping[str, Any]) -> bool:
    """True when the data producer is idempotent only because nobody said otherwise.

    As in the Java producer since Kafka 3.0 (and so in MM2's producers): idempotence is on
    unless `enable.idempotence` is set, or `acks` is set to something other than all.
    Without it, a produce the client retries after the broker had already written it
    lands twice -- a target node restart is enough."""
    return ("enable.idempotence" not in java and kwargs.get("acks", "all") == "all"
            and "transactional_id" not in kwargs)


async def _start_data_producer(flow: FlowSettings, kwargs: dict[str, Any], limit: int
                               ) -> tuple[AIOKafkaProducer, dict[str, Any], int]:
    """The started data producer, the settings it runs with and its pipelining depth
    (`limit`, or 1 when it is not idempotent or is transactional).

    A target that refuses idempotent producers (InitProducerId: some Kafka-compatible
    brokers, or a principal without write access) gets a plain producer when idempotence
    was only the default, with a WARNING naming the key; when the operator asked for it,
    the flow stops with that reason instead."""
    implicit = idempotent_by_default(flow.clients.target_producer, kwargs)
    if implicit:
        kwargs = dict(kwargs, enable_idempotence=True)
    producer = AIOKafkaProducer(**kwargs)
    depth = install(producer, limit)
    try:
        await producer.start()
        return producer, kwargs, depth
    except KafkaConnectionError:
        await _close_all([producer])
        raise
    except KafkaError as exc:
        await _close_all([producer])
        if not kwargs.get("enable_idempotence") or "transactional_id" in kwargs:
            raise
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        key = f"{flow.target}.producer.enable.idempotence"
        if not implicit:
            raise ConfigError(key, f"= true, but {flow.target} refused an idempotent "
                                   f"producer (InitProducerId: {why}); set it to false "
                                   "to copy without idempotence") from exc
        log.warning("%s->%s: %s refused an idempotent producer (InitProducerId: %s): "
                    "copying without idempotence, so a produce retried after the broker "
                    "wrote it lands twice (reported, never undone); set %s = false to "
                    "choose this and silence the warning", flow.source, flow.target,
                    flow.target, why, key)
    kwargs = dict(kwargs, enable_idempotence=False)
    producer = AIOKafkaProducer(**kwargs)
    try:
        await producer.start()
    except BaseException:
        await _close_all([producer])
        raise
    return producer, kwargs, 1


async def _close_all(clients: list[Any]) -> None:
    seen: set[int] = set()
    for client in clients:
        if id(client) in seen:
            continue
        seen.add(id(client))
        closer = getattr(client, "stop", None) or client.close
        with contextlib.suppress(Exception):  # closing must not hide the original cause
            await closer()


def batch_sizes(java: Mapping[str, str], kwargs: Mapping[str, Any]) -> dict[str, int]:
    """Produce batch and request sizes: large by default, never above what the operator set."""
    batch = int(kwargs.get("max_batch_size", DEFAULT_BATCH_BYTES)) if "batch.size" in java \
        else DEFAULT_BATCH_BYTES
    if "max.request.size" in java:
        request = int(kwargs["max_request_size"])
        return {"max_batch_size": min(batch, request), "max_request_size": request}
    return {"max_batch_size": batch, "max_request_size": max(1048576, batch + 65536)}
