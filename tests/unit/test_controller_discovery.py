"""When the controller looks at a flow's topics again (`FlowTopics.due`, `FlowTopics.saw`)."""

from __future__ import annotations

from mirrorline.controller.discovery import FlowTopics
from mirrorline.core.config import parse_config
from mirrorline.kafka.discovery import DiscoveryResult, RemoteTopic


def _flow(refresh: bool) -> FlowTopics:
    settings = parse_config(
        "clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
        "a->b.enabled = true\nrefresh.topics.interval.seconds = 600\n"
        f"refresh.topics.enabled = {'true' if refresh else 'false'}\n")
    return FlowTopics(settings.flows["a->b"], stale=False)


def test_remote_topics_not_visible_yet_are_looked_at_again_soon_even_without_refresh() -> None:
    """CreateTopics answers before the target's metadata shows the topic. A controller
    that waited for the next refresh (10 minutes here, never with refresh off) left the
    new topic's partitions unassigned, copying nothing, all that time."""
    for refresh in (True, False):
        flow = _flow(refresh)
        flow.refreshed_at = 1000.0
        delay = flow.saw(DiscoveryResult(pending={"orders"}), 1000.0)
        assert delay is not None and delay < 1.0
        assert not flow.due(1000.0)
        assert flow.due(1000.0 + delay)
        # Still not visible: looked at again, each time a little later, never beyond 10 s.
        delays = [flow.saw(DiscoveryResult(pending={"orders"}), 1000.0) for _ in range(12)]
        assert all(d is not None and d <= 12.0 for d in delays)
        # Visible now: back to the interval (or to nothing, with refresh off).
        assert flow.saw(DiscoveryResult(topics={"orders": RemoteTopic("a.orders", 3)}),
                        1001.0) is None
        flow.refreshed_at = 1001.0
        assert not flow.due(1002.0)
        assert flow.due(1001.0 + 600.0) is refresh


def test_a_flow_never_discovered_is_retried_at_the_interval_even_without_refresh() -> None:
    flow = _flow(False)
    flow.refreshed_at = 0.0
    assert not flow.due(599.0)
    assert flow.due(600.0)
    flow.stale = True
    assert flow.due(1.0)
