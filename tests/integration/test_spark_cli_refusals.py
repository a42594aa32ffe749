"""`mirrorline spark-executor` refuses bad settings before Spark starts, as a real process:
exit status 2 and the problem in one line (the parsing itself is in
tests/unit/test_spark_bookkeeping.py).

The clusters are addresses nothing listens on: the command stops before connecting.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("args", "message"), [
    (["--master", "mesos://h:5050"], "--master: 'mesos://h:5050' is not a Spark master URL"),
    (["--spark-conf", "oops"], "--spark-conf: 'oops' is not KEY=VALUE"),
])
def test_the_command_refuses_bad_spark_settings_with_status_2(
        tmp_path: Path, args: list[str], message: str) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\n"
                      "b.bootstrap.servers = 127.0.0.1:1\na->b.enabled = true\n")
    result = subprocess.run([sys.executable, "-m", "mirrorline", "spark-executor", "--config",
                             str(config), *args], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_command_refuses_unauthenticated_spark_off_loopback_in_one_line(
        tmp_path: Path) -> None:
    """`--bind` off loopback with `mirrorline.grpc.insecure = true` (so gRPC may start) and a
    standalone master without the cluster's secret: exit 2 and one line, before Spark."""
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = a, b\na.bootstrap.servers = 127.0.0.1:1\n"
                      "b.bootstrap.servers = 127.0.0.1:1\na->b.enabled = true\n"
                      "mirrorline.grpc.insecure = true\n")
    result = subprocess.run([sys.executable, "-m", "mirrorline", "spark-executor", "--config",
                             str(config), "--bind", "0.0.0.0", "--master",
                             "spark://127.0.0.1:1"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == ["mirrorline: configuration error: --master: spark://127.0.0.1:1: Spark "
                      "must authenticate because --bind 0.0.0.0 is not a loopback address, "
                      "and a standalone cluster needs its shared secret: give --spark-conf "
                      "spark.authenticate.secret=... (the secret the master and workers "
                      "use)"], result.stderr
