"""Refuse to start a flow that asks for transactions the replicator cannot give.

See `mirrorline.core.exactly_once` for the keys. `requested` uses transactions where the
probe succeeds and otherwise runs without them (with a warning: the tail-matching resume
still avoids duplicates after crashes);
`required` / `enabled` stops with a configuration error naming the key when the target
or the client cannot run transactions, with the reason the probe got. Where the probe
succeeds, both run the flow in transactions (`mirrorline.replicator.transactional`).
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


async def check_exactly_once(flow: FlowSettings, raw: Mapping[str, str]) -> bool:
    """True: copy `flow` in transactions (asked for, and the target and client can run
    them). Raise ConfigError when it requires them and they cannot run;
    TargetUnreachable when that cannot be known yet."""
    request = exactly_once_request(flow, raw)
    if request is None:
        return False
    kwargs = _kwargs(producer_kwargs, flow.clients.target_producer, f"{flow.name}|eos-probe")
    why = await transactions_unavailable(kwargs)
    if why is not None and ("KafkaConnectionError" in why or "Unable to bootstrap" in why):
        raise TargetUnreachable(why)
    if why is None:
        log.info("%s: %s = %s: every round of batches commits in one transaction on %s",
                 flow.name, request.key, request.value, flow.target)
        return True
    if not request.required:
        log.warning("%s: %s = %s, but this replicator's Kafka client cannot run transactions "
                    "on %s (InitProducerId: %s): records are copied without them (a batch "
                    "can be seen half-written by read_committed consumers); crashes still "
                    "copy nothing twice (see docs/guarantees.md)", flow.name, request.key,
                    request.value, flow.target, why)
        return False
    raise ConfigError(request.key, (
        f"= {request.value} asks for Kafka transactions on {flow.target}, but this "
        f"replicator's Kafka client cannot run them there (InitProducerId: {why}); "
        "remove the key or set exactly.once.support = requested to copy without "
        "transactions"))


__all__ = ["TargetUnreachable", "check_exactly_once"]
