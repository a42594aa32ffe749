"""Flow definitions between the properties file and the control log."""

from __future__ import annotations

import pytest

from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, compose, differences, file_definitions

FILE = """
clusters = a, b, c
a.bootstrap.servers = a:9092
b.bootstrap.servers = b:9092
c.bootstrap.servers = c:9092
b.consumer.max.poll.records = 77
topics = orders.*
offset.lag.max = 10
a->b.enabled = true
a->b.topics = payments
b->c.enabled = true
"""


def test_a_files_flows_become_complete_definitions() -> None:
    defs = file_definitions(parse_config(FILE))
    assert set(defs) == {"a->b", "b->c"}
    assert defs["a->b"].properties == {"topics": "payments", "offset.lag.max": "10"}
    assert defs["b->c"].properties == {"topics": "orders.*", "offset.lag.max": "10"}


def test_composed_settings_take_definitions_from_the_log_and_the_rest_from_the_file() -> None:
    deployment = parse_config(FILE)
    settings = compose(deployment, [Definition("a", "c", {"topics": "x.*"})])
    flow = settings.flows["a->c"]
    assert flow.enabled and flow.topics == ("x.*",)
    # The file's top-level definition keys do not leak into the log's flows...
    assert flow.offset_lag_max == 100
    # ...its own enabled flows are not enabled here, but deployment settings still apply.
    assert not settings.flows["a->b"].enabled
    assert settings.flows["b->c"].clients.source_consumer["max.poll.records"] == "77"


@pytest.mark.parametrize(("definition", "key"), [
    (Definition("a", "z", {}), "target"),
    (Definition("a", "a", {}), "target"),
    (Definition("a", "b", {"topics": "("}), "a->b.topics"),
    (Definition("a", "b", {"offset.lag.max": "lots"}), "a->b.offset.lag.max"),
    (Definition("a", "b", {"sasl.jaas.config": "secret"}), "sasl.jaas.config"),
    (Definition("a", "b", {"consumer.max.poll.records": "5"}), "consumer.max.poll.records"),
])
def test_bad_definitions_name_the_property(definition: Definition, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(parse_config(FILE), [definition])
    assert err.value.key == key


def test_differences_between_file_and_log_are_spelled_out() -> None:
    file = {"a->b": Definition("a", "b", {"topics": "x"}), "b->c": Definition("b", "c", {})}
    log = {"a->b": Definition("a", "b", {"topics": "y", "offset.lag.max": "5"}),
           "c->a": Definition("c", "a", {})}
    assert differences(file, log) == [
        "flow a->b: offset.lag.max is unset in the file but '5' in the control log",
        "flow a->b: topics is 'x' in the file but 'y' in the control log",
        "flow b->c is enabled in the file but not defined in the control log",
        "flow c->a is defined in the control log but not enabled in the file",
    ]


def test_the_files_top_level_flow_properties_are_the_defaults_of_new_flows() -> None:
    from mirrorline.core.flowdefs import file_defaults

    assert file_defaults(parse_config(FILE)) == {"topics": "orders.*", "offset.lag.max": "10"}
