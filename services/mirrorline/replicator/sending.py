"""Cancelling a flow's sends at once, and getting a data producer back afterwards.

A partition that is let go while its batch is still unacknowledged (the worker fenced
itself, the flow stops) must not deliver that batch later, after another owner resumed
from the target's tail: the only way to be sure with aiokafka is to abort the producer
(`mirrorline.kafka.producer_abort`). Every batch in flight fails at once; partitions that
keep running check the target before sending those records again. A new producer is
opened in the background, retrying while the target is unreachable.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaProducer

from mirrorline.core.backoff import Backoff
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.producer_abort import abort_producer
from mirrorline.replicator.delivery import DeliveryLoop

log = logging.getLogger(__name__)


async def abort_sends(flow: str, clients: FlowClients, delivery: DeliveryLoop,
                      reason: str) -> None:
    """Fail every batch in flight now and settle them; the loop sends nothing until
    `reopen_producer` gave it a new producer."""
    producer = delivery.producer
    if producer is None:
        return
    log.warning("%s: cancelling %d batches in flight: %s", flow, delivery.in_flight, reason)
    delivery.producer = None
    await abort_producer(producer, reason)
    await delivery.settle_all()


async def reopen_producer(flow: str, clients: FlowClients, delivery: DeliveryLoop,
                          backoff: Backoff) -> AIOKafkaProducer:
    """Open a new data producer (retrying with backoff) and hand it to the loop."""
    attempt = 0
    while True:
        try:
            producer = await clients.reopen_producer()
        except Exception as exc:
            delay = backoff.delay(attempt)
            attempt += 1
            log.warning("%s: cannot open a producer on the target (%r); retrying in %.1fs",
                        flow, exc, delay)
            await asyncio.sleep(delay)
            continue
        delivery.producer = producer
        delivery.wake.set()
        return producer


async def replace_transactional(flow: str, clients: FlowClients, delivery: DeliveryLoop,
                                backoff: Backoff, failed: AIOKafkaProducer
                                ) -> AIOKafkaProducer:
    """Exactly-once mode, after a failed transaction: close `failed` at once and open a
    producer with the same transactional id, whose InitProducerId makes the coordinator
    finish (commit or abort) whatever `failed` left open before anything new is written."""
    await abort_producer(failed, "transaction failed")
    return await reopen_producer(flow, clients, delivery, backoff)
