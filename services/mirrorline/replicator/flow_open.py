"""Opening one flow for replication: its clients, its bookkeeping and where each
partition starts.

Kept apart from the flow's running (`mirrorline.replicator.flow`) because what is opened
depends on the mode, and the rules for it are easy to get wrong in the middle of a
lifecycle:

* exactly-once mode: the data producer is transactional, with a transactional id that
  fences the previous owner (standalone: any replicator of the flow; under a controller:
  the same worker); progress, map runs and -- when they live on the target -- offset syncs
  join each round's transaction (`RoundBooks`), and committed progress is exact, so there
  is no tail of the target to match on resume;
* otherwise progress and offset syncs are written after each acknowledged batch, and a
  resume may match the target's tail (`mirrorline.resume.tail.match`, default true).
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorline.core.exactly_once import transactional_id
from mirrorline.core.policy import ReplicationPolicy
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.acked import FlowBookkeeping
from mirrorline.kafka.discovery import TopicDiscovery
from mirrorline.kafka.flowclients import FlowClients
from mirrorline.kafka.starts import StartPlanner
from mirrorline.replicator.transactional import RoundBooks

__all__ = ["OpenedFlow", "bootstrap_servers", "open_flow"]


@dataclass
class OpenedFlow:
    clients: FlowClients
    books: FlowBookkeeping
    #: The progress last recorded: (source topic, partition) -> next offset to copy.
    saved: dict[tuple[str, int], int]
    starts: StartPlanner
    discovery: TopicDiscovery
    #: Exactly-once mode: the bookkeeping each round's transaction carries; else None.
    txn_books: RoundBooks | None


async def open_flow(flow: FlowSettings, policy: ReplicationPolicy, worker_id: str, *,
                    standalone: bool, transactional: bool) -> OpenedFlow:
    """Create and start the flow's clients and bookkeeping; on failure close the clients
    and raise."""
    # Standalone, a flow has one owner whatever the worker id: any new replicator of
    # the flow fences the previous one. Under a controller, the worker owns its set.
    owner = "standalone" if standalone else worker_id
    txn_id = (transactional_id(flow.deployment, flow.name, owner) if transactional
              else None)
    clients = await FlowClients.open(flow, worker_id, transactional_id=txn_id)
    try:
        books = await FlowBookkeeping.open(flow, policy, clients)
        saved = await books.progress.load()
    except BaseException:
        await clients.close()
        raise
    map_topic = books.map_writer.topic
    # In exactly-once mode committed progress is exact: there is no tail to match.
    starts = StartPlanner.for_flow(flow, clients, name=flow.name, map_topic=map_topic,
                                   exact_progress=txn_id is not None)
    txn_books = None
    if txn_id is not None:
        books.committed_with_records = True
        txn_books = RoundBooks(flow.source, map_topic)
        if books.sync_sender is not None and not flow.offset_syncs_at_source:
            # Offset syncs on the target join each round's transaction.
            txn_books.planner, txn_books.syncs_topic = books.planner, books.sync_sender.topic
            books.sync_sender = None
    discovery = TopicDiscovery(flow, policy, source=clients.source_admin,
                               target=clients.target_admin)
    return OpenedFlow(clients, books, saved, starts, discovery, txn_books)


def bootstrap_servers(flow: FlowSettings) -> list[str]:
    """Both clusters' bootstrap servers, for the one line that says why a flow cannot
    start."""
    return [*flow.clients.source_admin.get("bootstrap.servers", "").split(","),
            *flow.clients.target_admin.get("bootstrap.servers", "").split(",")]
