"""No Mirrorline client ever makes a broker auto-create a topic.

aiokafka's clients refresh metadata for the topics they use with
`allow_auto_topic_creation = true` (Metadata v4+), so on a broker with Kafka's default
`auto.create.topics.enable = true` a consumer still assigned to a source topic that an
operator deleted re-creates it at once -- empty, with the broker's default partition
count -- and the deletion is silently undone (the same for a producer and a remote
topic). `forbid_auto_creation` makes every metadata request of the process's aiokafka
clients ask for no auto-creation; services install it at start (`mirrorline.runtime`).
"""

from __future__ import annotations

from typing import Any

import aiokafka.client
from aiokafka.protocol.metadata import MetadataRequest


class _NoAutoCreation(MetadataRequest):  # type: ignore[misc]
    """A metadata request that never lets the broker create the topics it names."""

    def __init__(self, topics: list[str] | None = None,
                 allow_auto_topic_creation: bool | None = None) -> None:
        super().__init__(topics, False)


def forbid_auto_creation() -> None:
    """From now on no aiokafka client of this process auto-creates a topic."""
    module: Any = aiokafka.client
    module.MetadataRequest = _NoAutoCreation


def auto_creation_forbidden() -> bool:
    module: Any = aiokafka.client
    return module.MetadataRequest is _NoAutoCreation
