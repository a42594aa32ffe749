"""The Apache Kafka release is pinned in one place, and every file that runs Kafka uses it."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from mirrorline.dev import kafka

ROOT = Path(__file__).resolve().parents[2]


def test_docker_compose_runs_the_release_the_suite_tests() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    images = re.findall(r"image:\s*apache/kafka:(\S+)", compose)
    assert images and set(images) == {kafka.KAFKA_VERSION}


def test_the_maven_project_takes_its_versions_from_the_one_pin() -> None:
    pom = resources.files("mirrorline.dev").joinpath("kafka-jars.pom.xml").read_text()
    assert re.findall(r"<version>\$\{kafka\.version\}</version>", pom)
    literal = re.findall(r"<version>(\d[^<]*)</version>", pom)
    assert literal == ["1"], "only the project's own version is written in the POM"


def test_readme_names_the_tested_release() -> None:
    assert f"Apache Kafka {kafka.KAFKA_VERSION}" in (ROOT / "README.md").read_text()


def test_cluster_ids_have_kafkas_uuid_form() -> None:
    ids = {kafka.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
        assert not cluster_id.startswith("-")
