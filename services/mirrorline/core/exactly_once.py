"""Which flows ask for MM2's exactly-once delivery (KIP-618), and how firmly.

MM2 commits a batch's records and its source offsets in one target transaction when the
worker runs with `exactly.once.source.support = enabled` (dedicated mode: set per target
cluster, `<target>.exactly.once.source.support`), and the connector key
`exactly.once.support = required` makes a connector refuse to start without it
(`requested`: use it where available). A Mirrorline replicator asked for this must either
deliver it or refuse to start, naming the key -- never run at-least-once silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mirrorline.core.settings import FlowSettings

__all__ = ["ExactlyOnceRequest", "exactly_once_request", "transactional_id"]


@dataclass(frozen=True)
class ExactlyOnceRequest:
    """The key (as written) that asks for transactions, its value, and whether the flow
    must refuse to run without them."""

    key: str
    value: str
    required: bool


def exactly_once_request(flow: FlowSettings, raw: Mapping[str, str]) -> ExactlyOnceRequest | None:
    """What `flow`'s configuration asks for; None when it does not ask for transactions."""
    for key in (f"{flow.name}.exactly.once.support", "exactly.once.support"):
        value = raw.get(key, "").strip().lower()
        if value in ("required", "requested"):
            return ExactlyOnceRequest(key, raw[key].strip(), value == "required")
    for key in (f"{flow.target}.exactly.once.source.support", "exactly.once.source.support"):
        value = raw.get(key, "").strip().lower()
        if value in ("enabled", "preparing"):
            return ExactlyOnceRequest(key, raw[key].strip(), value == "enabled")
    return None


def transactional_id(deployment: str | None, flow: str, owner: str) -> str:
    """The transactional id of the producer that copies `flow` for `owner` (a worker id).

    Stable across restarts, so a restarted owner's InitProducerId fences its previous
    incarnation (Kafka aborts that one's open transaction and refuses its producer epoch
    from then on), the way MM2 derives one id per connector task
    (`<group>-<connector>-<task>`). The deployment keeps two deployments on one target
    apart; the flow keeps two flows of one worker apart.
    """
    return f"mirrorline-{deployment or 'default'}-{flow}-{owner}"
