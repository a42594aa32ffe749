"""What it takes to run a faust app the way every other client of ours runs: the target
cluster's security as faust credentials, a consumer thread that cannot keep the process
alive, a fetch routine that wakes once a second, and a quiet end for an abandoned app.
Faust offers no setting for the last three, so they reach into its objects here, in one
place, rather than across the app's logic (`audit_app`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import faust
from mode.threads import WorkerThread

from mirrorline.kafka.reader import TAIL_ROUTINE_MS

log = logging.getLogger(__name__)


def faust_credentials(client_kwargs: Mapping[str, Any]) -> Any:
    """The target cluster's security (as translated for aiokafka) as faust credentials, so
    the app connects the way every other client of that cluster does."""
    protocol = client_kwargs.get("security_protocol", "PLAINTEXT")
    context = client_kwargs.get("ssl_context")
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = client_kwargs.get("sasl_mechanism", "PLAIN")
        if mechanism == "GSSAPI":
            return faust.GSSAPICredentials(
                kerberos_service_name=client_kwargs.get("sasl_kerberos_service_name", "kafka"),
                ssl_context=context, mechanism=mechanism)
        return faust.SASLCredentials(username=client_kwargs.get("sasl_plain_username"),
                                     password=client_kwargs.get("sasl_plain_password"),
                                     ssl_context=context, mechanism=mechanism)
    return None


def quiet_faust() -> None:
    """What is left of an abandoned faust app is cancelled or dropped at exit and would
    report each piece with a traceback; the warning before this already said why."""
    for name in ("faust", "mode"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


class DaemonWorker(WorkerThread):
    """Faust's consumer thread, as a daemon: if its consumer hangs on a cluster that does
    not answer even after the app was stopped, it must not keep the process alive."""

    def __init__(self, service: Any, **kwargs: Any) -> None:
        super().__init__(service, **kwargs)
        self.daemon = True

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:
            # aiokafka's consumer, stopped while its cluster is down, lets the cancellation
            # of its own fetch task escape; the thread is ending either way.
            log.info("faust's consumer thread ended with %r", exc)


def slow_fetch_routine(consumer_thread: Any) -> None:
    """Let the fetch routine of faust's consumer wake once a second with nothing to do, as
    every tail of ours does (`kafka.reader.TAIL_ROUTINE_MS`), not five times: faust
    offers no setting for aiokafka's `consumer_timeout_ms`, so it is set on the routine's
    fetcher, which reads it each time round (an aiokafka without it keeps its own)."""
    consumer = getattr(consumer_thread, "_consumer", None)
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None and hasattr(fetcher, "_fetcher_timeout"):
        fetcher._fetcher_timeout = TAIL_ROUTINE_MS / 1000
