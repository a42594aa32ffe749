"""Which flows ask for MM2's exactly-once delivery, and how firmly."""

from __future__ import annotations

import pytest

from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.exactly_once import exactly_once_request

BASE = ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
        "a->b.enabled = true\n")


def request(extra: str) -> tuple[str, str, bool] | None:
    settings = parse_config(BASE + extra)
    found = exactly_once_request(settings.flows["a->b"], settings.raw)
    return None if found is None else (found.key, found.value, found.required)


def test_nothing_asked() -> None:
    assert request("") is None
    assert request("exactly.once.support = garbage\n") is None
    assert request("b.exactly.once.source.support = disabled\n") is None


def test_the_connector_key_at_flow_and_top_level() -> None:
    assert request("a->b.exactly.once.support = required\n") == (
        "a->b.exactly.once.support", "required", True)
    assert request("exactly.once.support = requested\n") == (
        "exactly.once.support", "requested", False)


def test_the_worker_key_of_the_target_cluster() -> None:
    assert request("b.exactly.once.source.support = enabled\n") == (
        "b.exactly.once.source.support", "enabled", True)
    assert request("exactly.once.source.support = preparing\n") == (
        "exactly.once.source.support", "preparing", False)


def test_the_keys_are_not_reported_as_without_effect() -> None:
    settings = parse_config(BASE + "exactly.once.support = requested\n"
                                   "b.exactly.once.source.support = enabled\n")
    assert not [w for w in settings.warnings if "exactly.once" in (w.key or "")]


def test_the_target_clusters_worker_key_reaches_the_flow_itself() -> None:
    """Replicators (standalone or workers) decide from the flow's own settings."""
    settings = parse_config(BASE + "b.exactly.once.source.support = enabled\n")
    flow = settings.flows["a->b"]
    found = exactly_once_request(flow, flow.properties)
    assert found is not None and (found.key, found.required) == (
        "b.exactly.once.source.support", True)
    other = parse_config(BASE + "a.exactly.once.source.support = enabled\n").flows["a->b"]
    assert exactly_once_request(other, other.properties) is None  # a is not the target


def test_a_flow_asking_for_exactly_once_stays_off_the_spark_executor() -> None:
    """The Spark executor copies without transactions."""
    assert parse_config(BASE).flows["a->b"].offload.executor == "auto"
    for extra in ("exactly.once.support = required\n", "exactly.once.support = requested\n",
                  "b.exactly.once.source.support = enabled\n"):
        assert parse_config(BASE + extra).flows["a->b"].offload.executor == "workers"
    # Asked for explicitly: allowed where transactions are only requested ...
    settings = parse_config(BASE + "exactly.once.support = requested\n"
                                   "mirrorline.executor = spark\n")
    assert settings.flows["a->b"].offload.executor == "spark"
    # ... a configuration error naming both keys where they are required.
    with pytest.raises(ConfigError, match=r"mirrorline\.executor.*exactly\.once\.support"):
        parse_config(BASE + "exactly.once.support = required\na->b.mirrorline.executor = auto\n")
