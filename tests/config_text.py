"""Building configuration text for the config-loader tests (`test_config*.py`)."""

from __future__ import annotations

from textwrap import dedent

import pytest

from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import FlowSettings, MirrorSettings

BASE = "clusters = a, b\na.bootstrap.servers = a1:9092\nb.bootstrap.servers = b1:9092\n"
BASE_LINES = 3


def load(extra: str = "", base: str = BASE) -> MirrorSettings:
    return parse_config(base + dedent(extra).lstrip("\n"))


def flow(extra: str = "", name: str = "a->b") -> FlowSettings:
    return load(extra).flows[name]


def config_error(text: str, base: str = BASE) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(base + dedent(text).lstrip("\n"))
    return info.value


def warning_keys(settings: MirrorSettings) -> list[str]:
    return [w.key for w in settings.warnings]
