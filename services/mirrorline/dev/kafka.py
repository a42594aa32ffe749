"""Apache Kafka brokers (KRaft) for development, tests, the bench and the demo.

Tansu (`mirrorline.dev.brokers`) needs nothing but pip; Apache Kafka is what users run, so
the suite proves the product against it. Its jars come from Maven Central through
`mirrorline dev kafka install` (Maven's `dependency:copy-dependencies` into one folder, the
versions pinned here and nowhere else) and run with the machine's Java 17+.

A cluster is one or more combined broker+controller nodes on loopback, with a static
controller quorum, storage formatted on first start (so a restarted node keeps its log),
each node's log in its own file, and start-up timed. A cluster is handed out only once
every node answers Kafka requests as the cluster we formatted: `LocalKafkaCluster` quacks
like `LocalBroker` (alias, bootstrap, port, pid, log_path) so tests and tools take either.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from mirrorline.dev.brokers import (
    LOOPBACK,
    BrokerError,
    LocalBroker,
    _children,
    free_port,
    is_alive,
    log_tail,
    probe,
    spawn,
    stop_broker,
)

#: The Apache Kafka release every broker, tool and MirrorMaker 2 process here runs.
KAFKA_VERSION = "4.3.1"
#: The log4j2 release of the logging binding the Kafka POMs leave out.
LOG4J_VERSION = "2.24.3"
KAFKA_HOME_ENV = "MIRRORLINE_KAFKA_HOME"
_COMPLETE = ".complete"

#: Small heaps and a quick JIT: a test broker serves a few MB/s, and starts in seconds.
DEFAULT_JVM_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                    "-Djava.awt.headless=true")

#: Broker settings for a loopback development cluster on a small machine: few threads, few
#: internal partitions, no initial rebalance delay, retention checked every second. A node
#: killed and started again cannot register until its old registration's session has
#: expired (DUPLICATE_BROKER_REGISTRATION until then): a 5 s session instead of 9 s, with
#: heartbeats every second, brings such a node back about 4 s sooner.
DEV_SETTINGS: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    "broker.session.timeout.ms": "5000",
    "broker.heartbeat.interval.ms": "1000",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.num.partitions": "1",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.backoff.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "0",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "10000",
}


class KafkaNotInstalled(BrokerError):
    """Java or the Apache Kafka jars are missing; the message says how to get them."""


# --------------------------------------------------------------------------- install


def kafka_home() -> Path:
    """Where the jars live: `$MIRRORLINE_KAFKA_HOME`, else a per-version user cache folder."""
    configured = os.environ.get(KAFKA_HOME_ENV)
    if configured:
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "mirrorline" / f"kafka-{KAFKA_VERSION}"


def lib_dir(home: Path | None = None) -> Path:
    return (home or kafka_home()) / "lib"


def java_binary() -> str | None:
    """`$JAVA_HOME/bin/java` when set, else `java` on PATH; None without Java."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def installed(home: Path | None = None) -> bool:
    """True when the jars of `KAFKA_VERSION` were fully installed (not half a download)."""
    return (lib_dir(home) / _COMPLETE).is_file()


def available() -> bool:
    """True when Apache Kafka brokers can be started here: Java and the jars are present."""
    return java_binary() is not None and installed()


def require() -> tuple[str, Path]:
    """(java, lib dir), or KafkaNotInstalled saying what is missing and how to get it."""
    java = java_binary()
    if java is None:
        raise KafkaNotInstalled(
            "Apache Kafka brokers need Java 17 or newer (set JAVA_HOME or put java on PATH);"
            " without Java, use the embedded Tansu broker (--broker tansu)")
    if not installed():
        raise KafkaNotInstalled(
            f"Apache Kafka {KAFKA_VERSION} is not installed in {lib_dir()}: run "
            "'mirrorline dev kafka install' (needs Maven) or 'make kafka'")
    return java, lib_dir()


def install(home: Path | None = None, *, mvn: str = "mvn", quiet: bool = True) -> Path:
    """Fetch the pinned Apache Kafka jars from Maven Central into `home/lib`; return it.

    Idempotent: an installed version is left alone. The jars land in a temporary folder
    first and are moved in place whole, so an interrupted download never looks installed.
    Blocking (minutes on a cold Maven cache): call it from a thread on an event loop.
    """
    target = lib_dir(home)
    if installed(home):
        return target
    maven = shutil.which(mvn)
    if maven is None:
        raise KafkaNotInstalled(
            f"installing Apache Kafka {KAFKA_VERSION} needs Maven ('{mvn}' is not on PATH)")
    target.parent.mkdir(parents=True, exist_ok=True)
    pom_text = resources.files("mirrorline.dev").joinpath("kafka-jars.pom.xml").read_text()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".install-") as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(pom_text)
        staged = Path(work) / "lib"
        command = [maven, "-B", *(["-q"] if quiet else []), "-f", str(pom),
                   f"-Dkafka.version={KAFKA_VERSION}", f"-Dlog4j.version={LOG4J_VERSION}",
                   "dependency:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={staged}"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BrokerError(f"Maven could not fetch Apache Kafka {KAFKA_VERSION}:\n{tail}")
        (staged / _COMPLETE).write_text(f"{KAFKA_VERSION}\n")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target


def java_command(main_class: str, *args: str, log_config: Path | None = None,
                 jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
                 extra_classpath: Sequence[str] = (),
                 shared_classes: bool = False) -> list[str]:
    """The command line running `main_class` of the installed Kafka jars (tools, MM2, ...).

    With `shared_classes`, the JVM maps the broker's class-data archive when one was made
    (`ensure_class_archive`): classes come parsed and verified from it instead of the jars.
    """
    java, lib = require()
    classpath = os.pathsep.join([f"{lib}/*", *extra_classpath])
    command = [java, *jvm_opts]
    archive = class_archive(java, lib) if shared_classes else None
    if archive is not None:
        # A stale archive (another Java, changed jars) is ignored by the JVM; say nothing.
        command += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off"]
    if log_config is not None:
        command.append(f"-Dlog4j2.configurationFile={log_config}")
    return [*command, "-cp", classpath, main_class, *args]


def write_log_config(path: Path, log_file: Path, *, level: str = "INFO") -> Path:
    """A log4j2 configuration sending everything to `log_file` (Kafka's default is stdout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "Configuration:\n"
        "  Appenders:\n"
        "    File:\n"
        "      name: file\n"
        f"      fileName: \"{log_file}\"\n"
        "      PatternLayout:\n"
        "        pattern: \"[%d] %p %m (%c)%n\"\n"
        "  Loggers:\n"
        "    Logger:\n"
        "      - name: kafka.request.logger\n"
        "        level: WARN\n"
        "      - name: org.apache.kafka.controller\n"
        "        level: WARN\n"
        "      - name: state.change.logger\n"
        "        level: WARN\n"
        "    Root:\n"
        f"      level: {level}\n"
        "      AppenderRef:\n"
        "        - ref: file\n"
    )
    return path


# --------------------------------------------------------------------------- class data

#: `0` turns the broker's class-data archive off (neither made nor used).
CDS_ENV = "MIRRORLINE_KAFKA_CDS"
#: Per event loop: one archive made at a time; per process: a failed attempt is not retried.
_archive_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary())
_archive_failed: set[Path] = set()


def _archive_path(java: str, lib: Path) -> Path:
    """Where the archive for this Java binary and these jars lives (beside the jars)."""
    binary = Path(java).resolve()
    try:
        stamp = f"{binary}:{binary.stat().st_mtime_ns}:{KAFKA_VERSION}"
    except OSError:
        stamp = f"{binary}:{KAFKA_VERSION}"
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    return lib.parent / "cds" / f"broker-{key}.jsa"


def class_archive(java: str, lib: Path) -> Path | None:
    """The class-data archive of a broker's start for `java` and `lib`, if it was made."""
    if os.environ.get(CDS_ENV, "1").strip() == "0":
        return None
    path = _archive_path(java, lib)
    return path if path.is_file() else None


async def ensure_class_archive() -> Path | None:
    """Make the broker's class-data archive once (Java 13+ dynamic CDS); return it or None.

    A JVM starting a Kafka broker spends most of its start-up loading and verifying a few
    thousand classes; mapping them from an archive halves the time to a serving broker and
    its CPU (about 2.8 s to 1.3 s on a 2-core machine), which adds up over the dozens of
    brokers, restarts and tools a test session starts. The archive is dumped at the exit of
    a throwaway one-node broker that served a topic, into a temporary file moved into place
    whole, so a concurrent session sees either no archive or a complete one. Failing to make
    it only costs speed: None is returned and nothing is retried in this process.
    """
    if os.environ.get(CDS_ENV, "1").strip() == "0":
        return None
    java, lib = await asyncio.to_thread(require)
    path = _archive_path(java, lib)
    if path in _archive_failed:
        return None
    loop = asyncio.get_running_loop()
    lock = _archive_locks.setdefault(loop, asyncio.Lock())
    async with lock:
        if await asyncio.to_thread(path.is_file):
            return path
        try:
            await _dump_class_archive(path)
        except (OSError, BrokerError, subprocess.SubprocessError):
            _archive_failed.add(path)
            return None
        if not await asyncio.to_thread(path.is_file):
            _archive_failed.add(path)
            return None
        return path


async def _dump_class_archive(path: Path) -> None:
    await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=".dump-", dir=path.parent))
    staged = work / "broker.jsa"
    opts = (*DEFAULT_JVM_OPTS, f"-XX:ArchiveClassesAtExit={staged}", "-Xlog:cds*=off")
    try:
        cluster = await start_kafka("cds", directory=work / "cluster", jvm_opts=opts,
                                    archive=False)
        try:
            # A topic written and read, so the request paths every test takes are archived
            # too; should that fail, the archive of the start alone is still worth having.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(60.0):
                    await _warm_up(cluster.bootstrap)
        finally:
            # The archive is written at a clean exit, which takes a few seconds.
            await stop_kafka(cluster, timeout=60.0)
        if await asyncio.to_thread(staged.is_file):
            await asyncio.to_thread(os.replace, staged, path)
    finally:
        await asyncio.to_thread(shutil.rmtree, work, True)


async def _warm_up(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("warm", 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("warm", b"x", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition("warm", 0)])
        await consumer.getone()
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------- cluster


def new_cluster_id() -> str:
    """A random KRaft cluster id (Kafka's Uuid text form: 22 url-safe base64 characters)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):  # a leading '-' reads as an option on command lines
            return text


@dataclass(frozen=True)
class KafkaNode:
    """One combined broker+controller process of a cluster."""

    node_id: int
    port: int
    controller_port: int
    directory: str
    pid: int = 0
    #: Further listeners by name -> port (e.g. {"SASL_SSL": 40123}).
    listener_ports: Mapping[str, int] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def config_path(self) -> Path:
        return Path(self.directory) / "server.properties"

    @property
    def log_path(self) -> str:
        return str(Path(self.directory) / "server.log")


@dataclass(frozen=True)
class LocalKafkaCluster:
    """A running Apache Kafka cluster on loopback; quacks like `LocalBroker`."""

    alias: str
    cluster_id: str
    directory: str
    nodes: tuple[KafkaNode, ...]
    #: Seconds from launch to every node answering, for the start-up report.
    started_in: float = 0.0
    kind: str = "kafka"

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def bootstrap_for(self, listener: str) -> str:
        """The bootstrap list of a further listener given at start (`extra_listeners`)."""
        return ",".join(f"{LOOPBACK}:{node.listener_ports[listener]}" for node in self.nodes)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def pid(self) -> int:
        return self.nodes[0].pid

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(node.pid for node in self.nodes)

    @property
    def log_path(self) -> str:
        return self.nodes[0].log_path

    @property
    def storage(self) -> str:
        return self.directory

    def record(self) -> LocalBroker:
        """The cluster as `mirrorline dev brokers` records it in its state file."""
        return LocalBroker(alias=self.alias, port=self.port, pid=self.pid,
                           storage=self.directory, log_path=self.log_path, kind="kafka",
                           pids=self.pids, servers=self.bootstrap, cluster_id=self.cluster_id)

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"cluster {self.alias!r} has no node {node_id}")


def _server_properties(node: KafkaNode, voters: str, count: int,
                       extra_listeners: Mapping[str, str],
                       overrides: Mapping[str, str]) -> str:
    listeners = [f"PLAINTEXT://{LOOPBACK}:{node.port}",
                 f"CONTROLLER://{LOOPBACK}:{node.controller_port}"]
    advertised = [f"PLAINTEXT://{LOOPBACK}:{node.port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    for name, protocol in extra_listeners.items():
        port = node.listener_ports[name]
        listeners.append(f"{name}://{LOOPBACK}:{port}")
        advertised.append(f"{name}://{LOOPBACK}:{port}")
        protocols.append(f"{name}:{protocol}")
    replication = str(min(count, 3))
    settings: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": ",".join(protocols),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(Path(node.directory) / "data"),
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": "1",
        "default.replication.factor": replication,
        **DEV_SETTINGS,
        **overrides,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _plan_nodes(directory: Path, count: int, port: int | None,
                extra_listeners: Mapping[str, str]) -> list[KafkaNode]:
    nodes = []
    for index in range(count):
        node_id = index + 1
        nodes.append(KafkaNode(
            node_id=node_id,
            port=port if (port is not None and index == 0) else free_port(),
            controller_port=free_port(),
            directory=str(directory / f"node-{node_id}"),
            listener_ports={name: free_port() for name in extra_listeners},
        ))
    return nodes


def _prepare(directory: Path, count: int, port: int | None, listeners: Mapping[str, str],
             overrides: Mapping[str, str]) -> tuple[str, list[KafkaNode]]:
    """The cluster id and nodes of `directory` (planned anew on first start), configs written."""
    planned = _load_layout(directory) or _plan_nodes(directory, count, port, listeners)
    cluster_id = _read_cluster_id(directory) or new_cluster_id()
    voters = ",".join(f"{n.node_id}@{LOOPBACK}:{n.controller_port}" for n in planned)
    for node in planned:
        Path(node.directory).mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(
            _server_properties(node, voters, len(planned), listeners, overrides))
    _save_layout(directory, cluster_id, planned)
    return cluster_id, planned


#: `0`: every node's storage is formatted by Kafka's storage tool (no template).
FORMAT_TEMPLATE_ENV = "MIRRORLINE_KAFKA_FORMAT_TEMPLATE"


def _bootstrap_template() -> Path:
    """Where a copy of the storage tool's `bootstrap.checkpoint` is kept (beside the jars)."""
    return kafka_home() / "format" / "bootstrap.checkpoint"


def _template_allowed() -> bool:
    return os.environ.get(FORMAT_TEMPLATE_ENV, "1").strip() != "0"


def _format_from_template(node: KafkaNode, cluster_id: str) -> bool:
    """Format `node` as the storage tool would, without a JVM: its `bootstrap.checkpoint`
    (the release's feature levels, the same for every node) copied from one the tool wrote
    before, and `meta.properties` naming the node, its directory and the cluster."""
    template = _bootstrap_template()
    if not template.is_file():
        return False
    data = Path(node.directory) / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, data / "bootstrap.checkpoint")
    meta = (f"node.id={node.node_id}\ndirectory.id={new_cluster_id()}\nversion=1\n"
            f"cluster.id={cluster_id}\n")
    staged = data / "meta.properties.tmp"
    staged.write_text(meta)
    os.replace(staged, data / "meta.properties")  # written last: a formatted directory
    return True


def _keep_template(node: KafkaNode) -> None:
    """Keep the `bootstrap.checkpoint` the storage tool just wrote, for later nodes."""
    written = Path(node.directory) / "data" / "bootstrap.checkpoint"
    target = _bootstrap_template()
    if target.is_file() or not written.is_file():
        return
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}")
        shutil.copyfile(written, staged)
        os.replace(staged, target)


def _format(java_cmd: list[str], node: KafkaNode, cluster_id: str,
            scram: Sequence[str], plain: bool = False) -> None:
    """Format the node's storage once; a formatted one is left as it is (a restart).

    The storage tool is a JVM of its own (about 2 s on 2 cores). A `plain` node (the
    configuration this module writes, nothing added: no overrides, listeners or SCRAM
    users, so nothing for the tool to refuse and nothing but the release's feature levels
    to write) gets a copy of its output instead (`_format_from_template`), once the tool
    ran for one such node on this machine. Any other node is formatted by the tool, which
    checks its configuration and says clearly what is wrong."""
    if (Path(node.directory) / "data" / "meta.properties").is_file():
        return
    fits = plain and _template_allowed()
    if fits and _format_from_template(node, cluster_id):
        return
    command = [*java_cmd, "format", "-t", cluster_id, "-c", str(node.config_path),
               "--ignore-formatted"]
    for entry in scram:
        command += ["--add-scram", entry]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # A Java stack trace says little; its exception lines say what is wrong.
        lines = [line for line in (done.stdout + done.stderr).splitlines()
                 if line.strip() and not line.startswith(("\tat ", "\t... "))]
        raise BrokerError(f"cannot format the storage of Kafka node {node.node_id} in "
                          f"{node.directory}:\n  " + "\n  ".join(lines[-8:]))
    if fits:
        _keep_template(node)


def _launch_node(node: KafkaNode, detach: bool, jvm_opts: Sequence[str],
                 shared_classes: bool = True) -> KafkaNode:
    log_config = write_log_config(Path(node.directory) / "log4j2.yaml", Path(node.log_path))
    command = java_command("kafka.Kafka", str(node.config_path), log_config=log_config,
                           jvm_opts=jvm_opts, shared_classes=shared_classes)
    proc, _ = spawn(command, Path(node.directory) / "stdout.log", detach)
    if not detach:
        _children[proc.pid] = proc
    return replace(node, pid=proc.pid)


async def start_kafka(
    alias: str,
    *,
    directory: Path,
    nodes: int = 1,
    port: int | None = None,
    detach: bool = False,
    ready_timeout: float = 90.0,
    overrides: Mapping[str, str] | None = None,
    extra_listeners: Mapping[str, str] | None = None,
    scram: Sequence[str] = (),
    jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
    archive: bool = True,
) -> LocalKafkaCluster:
    """Start (or restart) an Apache Kafka cluster of `nodes` nodes for cluster `alias`.

    `directory` holds one folder per node (config, data, logs); a directory formatted
    before is started as it is, keeping its log and cluster id. `overrides` are broker
    settings (for example an authorizer); `extra_listeners` maps further listener names to
    security protocols ({"SASL_PLAINTEXT": "SASL_PLAINTEXT"}), each on a free port per node;
    `scram` entries seed SCRAM users at format time ('SCRAM-SHA-512=[name=u,password=p]').
    Returns once every node answers as the formatted cluster; otherwise stops what it
    started and raises BrokerError with the tail of the failing node's log. With `archive`,
    the JVMs map the broker's class-data archive, made on the first start if need be
    (`ensure_class_archive`).
    """
    if not alias or any(c.isspace() or c in "/\\" for c in alias):
        raise BrokerError(f"invalid cluster alias {alias!r}")
    if nodes < 1:
        raise BrokerError(f"a cluster needs at least one node, not {nodes}")
    await asyncio.to_thread(require)
    if archive:
        await ensure_class_archive()
    directory = await asyncio.to_thread(Path.absolute, directory)
    cluster_id, planned = await asyncio.to_thread(
        _prepare, directory, nodes, port, dict(extra_listeners or {}), dict(overrides or {}))
    storage_tool = java_command("kafka.tools.StorageTool",
                                log_config=write_log_config(
                                    directory / "tools-log4j2.yaml",
                                    directory / "tools.log"),
                                shared_classes=archive)
    plain = not overrides and not extra_listeners and not scram
    await asyncio.gather(*(asyncio.to_thread(_format, storage_tool, node, cluster_id, scram,
                                             plain)
                           for node in planned))
    started = time.monotonic()
    running: list[KafkaNode] = []
    try:
        for node in planned:
            running.append(await asyncio.to_thread(_launch_node, node, detach, jvm_opts,
                                                   archive))
        cluster = LocalKafkaCluster(alias, cluster_id, str(directory), tuple(running))
        await _await_cluster(cluster, ready_timeout)
    except BaseException:
        await asyncio.gather(*(asyncio.to_thread(stop_broker, n.pid, 2.0) for n in running))
        raise
    return replace(cluster, started_in=time.monotonic() - started)


async def restart_node(cluster: LocalKafkaCluster, node_id: int, *,
                       ready_timeout: float = 90.0,
                       jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS) -> LocalKafkaCluster:
    """Start node `node_id` again (after `stop_node`); returns the cluster with its new pid."""
    node = await asyncio.to_thread(_launch_node, cluster.node(node_id), False, jvm_opts)
    nodes = tuple(node if n.node_id == node_id else n for n in cluster.nodes)
    restarted = replace(cluster, nodes=nodes)
    await _await_node(restarted, node, ready_timeout)
    return restarted


async def stop_node(cluster: LocalKafkaCluster, node_id: int, *, kill: bool = False,
                    timeout: float = 20.0) -> None:
    """Stop one node: SIGKILL when `kill`, else SIGTERM (a controlled shutdown)."""
    pid = cluster.node(node_id).pid
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    await asyncio.to_thread(stop_broker, pid, 0.0 if kill else timeout)


async def stop_kafka(cluster: LocalKafkaCluster, *, timeout: float = 10.0) -> None:
    """Stop every node of the cluster (SIGTERM, then SIGKILL after `timeout` seconds)."""
    await asyncio.gather(*(asyncio.to_thread(stop_broker, node.pid, timeout)
                           for node in cluster.nodes))


def is_kafka_process(pid: int, directory: str) -> bool:
    """True when `pid` is alive and is a Kafka node started from a folder under `directory`."""
    if not is_alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    return "kafka.Kafka" in argv and any(arg.startswith(directory) for arg in argv)


async def _await_cluster(cluster: LocalKafkaCluster, ready_timeout: float) -> None:
    await asyncio.gather(*(_await_node(cluster, node, ready_timeout) for node in cluster.nodes))


async def _await_node(cluster: LocalKafkaCluster, node: KafkaNode, ready_timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_timeout
    while True:
        if not is_alive(node.pid):
            tail = await asyncio.to_thread(_node_log_tail, node)
            raise BrokerError(
                f"Kafka node {node.node_id} of {cluster.alias!r} on {node.bootstrap} exited "
                f"during start-up; log {node.log_path}:\n{tail}")
        remaining = deadline - loop.time()
        if remaining <= 0:
            tail = await asyncio.to_thread(_node_log_tail, node)
            raise BrokerError(
                f"Kafka node {node.node_id} of {cluster.alias!r} on {node.bootstrap} did not "
                f"answer within {ready_timeout:g}s; log {node.log_path}:\n{tail}")
        cluster_id = await probe(node.bootstrap, timeout=min(2.0, remaining))
        if cluster_id is not None:
            if cluster_id != cluster.cluster_id:
                raise BrokerError(
                    f"{node.bootstrap} answers as cluster {cluster_id!r}, not "
                    f"{cluster.alias!r} ({cluster.cluster_id}): another broker holds the port")
            return
        await asyncio.sleep(0.2)


def _node_log_tail(node: KafkaNode) -> str:
    text = log_tail(node.log_path)
    stdout = Path(node.directory) / "stdout.log"
    if stdout.is_file() and stdout.stat().st_size:
        text += "\n  (stdout)\n" + log_tail(stdout)
    return text


# --------------------------------------------------------------------------- layout file

_LAYOUT = "cluster.txt"


def _save_layout(directory: Path, cluster_id: str, nodes: Sequence[KafkaNode]) -> None:
    """Record the ports and id, so a restart from `directory` listens where clients look."""
    lines = [f"cluster.id={cluster_id}"]
    for node in nodes:
        extra = ";".join(f"{name}:{port}" for name, port in node.listener_ports.items())
        lines.append(f"node={node.node_id},{node.port},{node.controller_port},{extra}")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / _LAYOUT).write_text("\n".join(lines) + "\n")


def _read_cluster_id(directory: Path) -> str | None:
    with contextlib.suppress(OSError):
        for line in (directory / _LAYOUT).read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.partition("=")[2]
    return None


def _load_layout(directory: Path) -> list[KafkaNode] | None:
    try:
        lines = (directory / _LAYOUT).read_text().splitlines()
    except OSError:
        return None
    nodes = []
    for line in lines:
        if not line.startswith("node="):
            continue
        node_id, port, controller, extra = line.partition("=")[2].split(",", 3)
        ports = dict(item.split(":") for item in extra.split(";") if item)
        nodes.append(KafkaNode(int(node_id), int(port), int(controller),
                               str(directory / f"node-{node_id}"),
                               listener_ports={k: int(v) for k, v in ports.items()}))
    return nodes or None
