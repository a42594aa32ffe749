"""The Spark driver's class-data archive: used when made for this Java and PySpark, else
not, and never when switched off (the JVM options are what a user's driver starts with)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mirrorline_spark.executor import classdata
from mirrorline_spark.executor.driver import DRIVER_JAVA_OPTIONS


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(classdata.CDS_ENV, raising=False)
    return tmp_path


def test_the_driver_maps_the_archive_made_for_its_java_and_pyspark(cache: Path) -> None:
    path = classdata.archive_path()
    if path is None:
        pytest.skip("no java binary here")
    assert path.is_relative_to(cache)
    assert classdata.driver_java_options(DRIVER_JAVA_OPTIONS) == DRIVER_JAVA_OPTIONS
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = classdata.driver_java_options(DRIVER_JAVA_OPTIONS)
    assert options.startswith(DRIVER_JAVA_OPTIONS)
    assert f"-XX:SharedArchiveFile={path}" in options.split()


def test_an_archive_switched_off_is_neither_used_nor_made(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = classdata.archive_path()
    if path is None:
        pytest.skip("no java binary here")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    monkeypatch.setenv(classdata.CDS_ENV, "0")
    assert classdata.driver_java_options(DRIVER_JAVA_OPTIONS) == DRIVER_JAVA_OPTIONS
    path.unlink()
    assert classdata.make_archive() is None
    assert not path.exists()
