"""The one host every service starts and stops through.

The six services (replicator worker and standalone, controller, checkpointer, config sync,
heartbeat, Spark executor) share one lifecycle, and it lives here once so that a fix to
it reaches all of them:

* start: the service's own checks (`check`), telemetry, its instruments
  (`register_metrics`), the gRPC server with health NOT_SERVING (`add_servicers`), what
  runs without the home cluster (`started`);
* join (services with a control log): open it in the background with one retry loop
  (`mirrorline.controlplane.join.join_home`), saying why in the one unreachable-cluster
  form (`kafka.causes.unreachable`) while the home cluster does not answer, then do what
  the log says (`on_joined`) and, for services the Admin API forwards to, announce the
  address to the leading controller;
* health: re-evaluated every second (`evaluate_health`, by default `serving`), and
  NOT_SERVING in any case until the control log is read (and, with the reason logged,
  when what follows joining failed);
* stop, bounded at every step: health NOT_SERVING, the host's tasks cancelled until
  they end (`cancel_and_wait`), the service's parts (`stop_parts`, each bounded with
  `stop_within`), the control plane (`close_home`), the rest (`stop_rest`), gRPC and
  telemetry last.

Signals and the process-wide stop budget are `mirrorline.runtime`'s (`run_service`).
A host is also an async context manager: `async with Service(...) as s:` starts and stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self

import grpc
from opentelemetry.metrics import Meter

from mirrorline.controlplane.announce import announce_forever
from mirrorline.controlplane.home import control_topics, home_clients, home_cluster
from mirrorline.controlplane.join import join_home
from mirrorline.controlplane.log import ControlLog
from mirrorline.core.errors import one_line
from mirrorline.core.settings import MirrorSettings
from mirrorline.grpcserver import ServiceServer
from mirrorline.runtime import cancel_and_wait, stop_within
from mirrorline.telemetry import Telemetry, setup_telemetry

__all__ = ["HEALTH_S", "ServiceHost"]

#: How often health is re-evaluated.
HEALTH_S = 1.0


class ServiceHost:
    """Telemetry, gRPC with health, joining the control log, announcing, a bounded stop.

    A service sets `kind`, passes `joins` (whether it reads the control log) and
    implements `add_servicers` and `serving`; every other hook is optional.
    """

    #: The service's name: telemetry, logs, client ids and the announcement.
    kind: ClassVar[str]
    #: Announce the gRPC address to the leading controller once joined (the services the
    #: Admin API forwards to; workers and executors say it in their heartbeats instead).
    announces: ClassVar[bool] = False
    #: How long gRPC calls in flight get to finish at the stop.
    grpc_grace_s: ClassVar[float] = 0.3

    def __init__(self, settings: MirrorSettings, *, instance_id: str,
                 targets: Sequence[str] | None, grpc_host: str, grpc_port: int,
                 metrics_host: str, metrics_port: int | None, advertise: str | None,
                 joins: bool, interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
                 ) -> None:
        self.settings = settings
        self.instance_id = instance_id
        self._targets = tuple(targets) if targets else None
        self._grpc = ServiceServer(name=f"{self.kind} {instance_id}", host=grpc_host,
                                   port=grpc_port, interceptors=interceptors)
        self._metrics = (metrics_host, metrics_port)
        self._advertise = advertise
        #: Reads the control log (and retries its home cluster until it answers).
        self.joins = joins
        self.telemetry: Telemetry | None = None
        #: The address other processes reach this one at (set by `start`).
        self.address = ""
        self._control: ControlLog | None = None
        #: The control log an attempt to join is opening.
        self._opening: ControlLog | None = None
        #: Why the home cluster cannot be joined yet; None when it can (or once joined).
        self.home_error: str | None = None
        #: The control plane is open (`on_joined` has been called).
        self.joined_home = False
        #: Why `on_joined` failed (health stays NOT_SERVING); None when it did not.
        self.start_error: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        #: Logs under the service's own module name, as each service logged before.
        self._log = logging.getLogger(type(self).__module__)

    # -- what a service says of itself -------------------------------------------------
    async def check(self) -> None:
        """Refuse to start (e.g. a ConfigError), before anything is opened."""

    def register_metrics(self, meter: Meter) -> None:
        """Create the service's instruments (before anything runs)."""

    def add_servicers(self, server: ServiceServer) -> None:
        """Add the service's gRPC servicers to `server` (not started yet)."""
        raise NotImplementedError

    async def started(self) -> None:
        """gRPC answers: start what runs without the control log."""

    @property
    def telemetry_instance(self) -> str:
        return self.instance_id

    @property
    def control_client_id(self) -> str:
        """The client id of the control-log reader."""
        return f"{self.kind}-{self.instance_id}"

    @property
    def home(self) -> str:
        """The cluster that holds the control log."""
        return home_cluster(self.settings, self._targets)

    async def open_home(self) -> None:
        """One attempt at opening the control plane: `self._control` is set once it is
        read (not before: `_control` says "joined"). On an error `close_home` is called,
        then the attempt is repeated."""
        consumer, _, _ = home_clients(self.settings, self.home, self.control_client_id)
        self._opening = ControlLog(consumer_kwargs=consumer,
                                   topic=control_topics(self.settings)[0])
        await self._opening.start()
        self._control, self._opening = self._opening, None

    async def close_home(self) -> None:
        """Close what `open_home` opened (bounded: the cluster may not answer)."""
        closing = [c for c in (self._opening, self._control) if c is not None]
        self._opening = self._control = None
        for control in closing:
            await stop_within(control.stop(), 0.3, "closing the control log reader")

    def report_home(self, reason: str | None) -> None:
        """Why the home cluster cannot be joined (None: it answered)."""
        self.home_error = reason

    async def on_joined(self) -> None:
        """The control plane is open: do what the log says."""

    def serving(self) -> bool:
        """Whether health says SERVING now."""
        raise NotImplementedError

    def evaluate_health(self) -> bool:
        """The health verdict, every `HEALTH_S`: `serving()`, and what a service adds
        (saying why it is not serving)."""
        return self.serving()

    async def stop_parts(self) -> None:
        """Stop the service's own parts (its tasks are already cancelled), each bounded."""

    async def stop_rest(self) -> None:
        """Stop what must outlive the control plane's close."""

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def grpc_port(self) -> int | None:
        return self._grpc.port

    def spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task of the service: cancelled (until it ends) at the stop."""
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.append(task)
        return task

    async def start(self) -> None:
        await self.check()
        self.telemetry = setup_telemetry(self.kind, instance=self.telemetry_instance,
                                         metrics_port=self._metrics[1],
                                         metrics_host=self._metrics[0])
        await self.telemetry.start()
        self.register_metrics(self.telemetry.meter)
        self.add_servicers(self._grpc)
        port = await self._grpc.start()
        self.address = self._advertise or f"127.0.0.1:{port}"
        await self.started()
        if self.joins:
            self.spawn(self._join(), "join the control plane")
        self.spawn(self._health(), "health")

    async def _join(self) -> None:
        await join_home(self.settings, self.home, self.open_home, self.close_home,
                        report=self.report_home)
        self.joined_home = True
        try:
            await self.on_joined()
        except Exception as exc:  # said, never lost in a task nobody reads
            self.start_error = f"starting after joining the control log failed: " \
                               f"{one_line(exc)}"
            self._log.error("%s %s: %s", self.kind, self.instance_id, self.start_error)
            self._log.debug("starting after joining failed", exc_info=True)
            return
        if self.announces:
            assert self._control is not None
            self.spawn(announce_forever(self._control, self.kind, self.instance_id,
                                        self.address), "announce")

    async def _health(self) -> None:
        while True:
            # NOT_SERVING while joining, whatever else the service would say.
            serving = self.evaluate_health() and self.start_error is None \
                and (self.joined_home or not self.joins)
            await self._grpc.set_serving(serving)
            await asyncio.sleep(HEALTH_S)

    async def stop(self) -> None:
        """Bounded at every step: a stop never waits on a cluster that does not answer."""
        await self._grpc.set_serving(False)
        # Cancelled until they end: a client connecting to a cluster that does not
        # answer can swallow one cancellation.
        await cancel_and_wait(*self._tasks)
        await self.stop_parts()
        await self.close_home()
        await self.stop_rest()
        await self._grpc.stop(grace=self.grpc_grace_s)
        if self.telemetry is not None:
            await self.telemetry.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()
