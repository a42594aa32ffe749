"""Mirrorline: mirror Kafka clusters into each other, speaking MirrorMaker 2's formats."""

__version__ = "0.1.0"
