"""Apache Kafka's MirrorMaker 2, run beside Mirrorline for tests and the bench.

MM2 comes with the broker jars (`mirrorline dev kafka install` fetches `connect-mirror`,
`connect-mirror-client` and `connect-runtime` of the same `KAFKA_VERSION`). It runs here in
dedicated mode, `org.apache.kafka.connect.mirror.MirrorMaker <file> --clusters <alias>`,
from the same properties file Mirrorline reads, with its log4j2 log in a file.

What running MM2 4.3.1 here showed (and the tests rely on):
- `--clusters t` starts the herders of every flow `s->t` whose target is `t`: one
  Connect worker per flow, running MirrorSourceConnector, MirrorCheckpointConnector and
  MirrorHeartbeatConnector against the target cluster.
- Each flow's worker keeps Connect's own topics on the target, named after the source
  alias: `mm2-offsets.<s>.internal` (source progress), `mm2-configs.<s>.internal`,
  `mm2-status.<s>.internal`. The progress record of a partition has the key
  `["MirrorSourceConnector",{"cluster":"<s>","partition":P,"topic":"<topic>"}]` and the
  value `{"offset":N}`, N being the offset of the last record copied (it resumes at N+1).
- MM2's defaults ask for more replicas than a one-node cluster has (see
  docs/configuration-keys.md); the internal topics of one flow are created with
  `replication.factor`, `checkpoints.topic.replication.factor`,
  `heartbeats.topic.replication.factor`, `offset-syncs.topic.replication.factor` and the
  worker's `offset.storage`, `config.storage`, `status.storage` factors, so on the
  one-node clusters here every one of them is 1 (`SINGLE_NODE_SETTINGS`). Without them
  MM2 still logs "Kafka MirrorMaker started", but its worker cannot create
  `mm2-offsets.<s>.internal` (3 replicas asked), the herder thread exits with an ERROR
  and nothing is copied while the process runs on.
- The log says "Kafka MirrorMaker started" once the herders run; the connectors start
  their tasks after that (a rebalance of each worker's group), so the first records reach
  the target a few seconds later (about 30 s from launch on a loaded 2-core machine).
  Callers that need records flowing wait for them.
- SIGTERM runs MM2's shutdown hook: tasks stop, their last source offsets are committed,
  and the JVM exits with status 143. SIGKILL leaves the progress of the last
  `offset.flush.interval.ms` (60 s by default) uncommitted: records copied since are on
  the target but not in `mm2-offsets`, and an MM2 restarted then copies them again
  (observed: killed before its first flush, a restarted MM2 copied every record twice).
- The heartbeat connector of flow `s->t` writes `heartbeats` on `t`, keyed (s, t).
- MM2 4.3.1's `ReplicationPolicy.isInternalTopic` counts `__*`, `.*`, `mm2*.internal` and
  checkpoint topics only (not other `*.internal` names), so its `MirrorClient.remoteTopics()`
  lists Mirrorline's own `mirrorline-*.internal` topics as remote topics.
- MM2 ignores the keys it does not know (Mirrorline's `mirrorline.*`, `canary.*`, ...), so
  one file serves both.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mirrorline.dev.brokers import BrokerError, _children, log_tail, spawn, stop_broker
from mirrorline.dev.kafka import DEFAULT_JVM_OPTS, java_command, write_log_config

#: MM2's dedicated-mode entry point.
MAIN_CLASS = "org.apache.kafka.connect.mirror.MirrorMaker"
#: The line MM2 logs once every herder is started.
STARTED_LINE = "Kafka MirrorMaker started"

#: Top-level keys every internal topic MM2 creates needs on one-node clusters.
SINGLE_NODE_SETTINGS: Mapping[str, str] = {
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "config.storage.replication.factor": "1",
}

#: Quick to start and to notice changes on a loopback test machine.
QUICK_SETTINGS: Mapping[str, str] = {
    "refresh.topics.interval.seconds": "2",
    "refresh.groups.interval.seconds": "2",
    "emit.checkpoints.interval.seconds": "1",
    "sync.group.offsets.interval.seconds": "1",
    "offset.flush.interval.ms": "1000",
}


class MirrorMakerError(BrokerError):
    """MM2 did not start or exited; the message holds the tail of its log."""


@dataclass
class MirrorMaker2:
    """One running dedicated-mode MM2 process."""

    config_path: Path
    log_path: Path
    clusters: tuple[str, ...]
    pid: int
    proc: subprocess.Popen[bytes]

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 30) -> str:
        text = log_tail(self.log_path, lines)
        stdout = self.log_path.with_suffix(".stdout")
        if stdout.is_file() and stdout.stat().st_size:
            text += "\n  (stdout)\n" + log_tail(stdout, lines)
        return text


def _launch(config_path: Path, directory: Path, clusters: Sequence[str],
            jvm_opts: Sequence[str], name: str) -> MirrorMaker2:
    directory.mkdir(parents=True, exist_ok=True)
    log_path = (directory / f"{name}.log").absolute()
    log_config = write_log_config(directory / f"{name}-log4j2.yaml", log_path)
    args = [str(config_path)]
    if clusters:
        args += ["--clusters", *clusters]
    # The broker's class-data archive holds the client classes MM2 shares with it; a run
    # with its own JVM options (the bench's) is left as it asked.
    command = java_command(MAIN_CLASS, *args, log_config=log_config, jvm_opts=jvm_opts,
                           shared_classes=tuple(jvm_opts) == DEFAULT_JVM_OPTS)
    proc, _ = spawn(command, log_path.with_suffix(".stdout"), False)
    _children[proc.pid] = proc
    return MirrorMaker2(config_path, log_path, tuple(clusters), proc.pid, proc)


async def start_mm2(config_path: Path, *, directory: Path, clusters: Sequence[str] = (),
                    ready_timeout: float = 120.0, name: str = "mm2",
                    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS) -> MirrorMaker2:
    """Start MM2 from `config_path` for the target `clusters` (all when empty).

    Returns once its log says "Kafka MirrorMaker started"; raises MirrorMakerError with the
    log's tail (and stops the process) if it exits first or `ready_timeout` passes.
    """
    config_path = await asyncio.to_thread(Path.absolute, config_path)
    mm2 = await asyncio.to_thread(_launch, config_path, directory, clusters, jvm_opts, name)
    try:
        await wait_logged(mm2, STARTED_LINE, ready_timeout)
    except BaseException:
        await stop_mm2(mm2, kill=True)
        raise
    return mm2


async def wait_logged(mm2: MirrorMaker2, text: str, timeout: float) -> None:
    """Wait until MM2's log holds `text`; MirrorMakerError if it exits or time runs out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if text in await asyncio.to_thread(mm2.log_text):
            return
        if not mm2.running:
            raise MirrorMakerError(
                f"MirrorMaker 2 exited with {mm2.proc.returncode} before logging {text!r}; "
                f"log {mm2.log_path}:\n{await asyncio.to_thread(mm2.tail)}")
        if loop.time() > deadline:
            raise MirrorMakerError(
                f"MirrorMaker 2 did not log {text!r} within {timeout:g}s; "
                f"log {mm2.log_path}:\n{await asyncio.to_thread(mm2.tail)}")
        await asyncio.sleep(0.3)


async def stop_mm2(mm2: MirrorMaker2, *, kill: bool = False, timeout: float = 60.0) -> int:
    """Stop MM2: SIGKILL when `kill`, else SIGTERM (its shutdown hook commits progress),
    then SIGKILL after `timeout` seconds. Returns the exit status."""
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(mm2.pid, signal.SIGKILL)
    await asyncio.to_thread(stop_broker, mm2.pid, 0.0 if kill else timeout)
    _children.pop(mm2.pid, None)
    code = await asyncio.to_thread(mm2.proc.wait)
    return code
