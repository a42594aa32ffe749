"""Refuse to start a flow that asks for transactions the replicator cannot give.

See `mirrorline.core.exactly_once` for the keys. `requested` runs without transactions
(with a warning: the tail-matching resume still avoids duplicates after crashes);
`required` / `enabled` stops with a configuration error naming the key: when the target
or the client cannot run transactions, with the reason the probe got; when both can,
because this version does not yet commit batches in transactions.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from mirrorline.core.errors import ConfigError
from mirrorline.core.exactly_once import exactly_once_request
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.clients import build as _kwargs
from mirrorline.kafka.clients import producer_kwargs
from mirrorline.kafka.transactions import transactions_unavailable

log = logging.getLogger(__name__)


class TargetUnreachable(Exception):
    """The probe could not reach the target: decide later, when it answers."""


async def check_exactly_once(flow: FlowSettings, raw: Mapping[str, str]) -> None:
    """Raise ConfigError when `flow` requires transactions this replicator cannot give;
    TargetUnreachable when that cannot be known yet."""
    request = exactly_once_request(flow, raw)
    if request is None:
        return
    if not request.required:
        log.warning("%s: %s = %s: records are copied without transactions (a batch can be "
                    "seen half-written by read_committed consumers); crashes still copy "
                    "nothing twice (see the README)", flow.name, request.key, request.value)
        return
    kwargs = _kwargs(producer_kwargs, flow.clients.target_producer, f"{flow.name}|eos-probe")
    why = await transactions_unavailable(kwargs)
    if why is not None and ("KafkaConnectionError" in why or "Unable to bootstrap" in why):
        raise TargetUnreachable(why)
    if why is not None:
        raise ConfigError(request.key, (
            f"= {request.value} asks for Kafka transactions on {flow.target}, but this "
            f"replicator's Kafka client cannot run them there (InitProducerId: {why}); "
            "remove the key or set exactly.once.support = requested to copy without "
            "transactions"))
    raise ConfigError(request.key, (
        f"= {request.value}: {flow.target} runs transactions, but this version of the "
        "replicator does not commit batches in transactions yet; remove the key or set "
        "exactly.once.support = requested to copy without them"))


__all__ = ["TargetUnreachable", "check_exactly_once"]
