"""Can this replicator's Kafka client run transactions against a cluster? Ask it.

A transactional producer must first obtain a producer id and epoch (InitProducerId). If
that fails -- the broker has no transaction coordinator, or the client speaks a version
the broker refuses (aiokafka sends InitProducerId v0, which some Kafka-compatible brokers
reject) -- no transaction can ever commit, and the caller must say so instead of copying
without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer


async def transactions_unavailable(producer_kwargs: Mapping[str, Any], *,
                                   timeout: float = 15.0) -> str | None:
    """None when a transactional producer starts on the cluster, else why it does not."""
    kwargs = dict(producer_kwargs)
    kwargs.update(transactional_id=f"mirrorline-probe-{uuid.uuid4().hex}",
                  enable_idempotence=True, acks="all")
    producer = AIOKafkaProducer(**kwargs)
    try:
        await asyncio.wait_for(producer.start(), timeout)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(producer.stop(), 5)
    return None
