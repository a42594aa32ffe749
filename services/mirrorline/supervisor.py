"""`mirrorline run`: this deployment's services as separate OS processes, kept alive.

Each service runs as its own `python -m mirrorline <service> ...` process so that a crash
in one cannot take the others down. A child that exits unexpectedly is restarted with
exponential backoff (reset after a minute of healthy running): at ERROR when it crashed
or was killed, at WARNING when it stopped cleanly (status 0, someone else's SIGTERM). A
child exiting with status 2 cannot run as configured (a configuration error, a port it
cannot listen on): restarting cannot help, so everything stops and `run` exits with 2.
SIGTERM/SIGINT stop all children (SIGTERM, then SIGKILL after the grace period; each
service bounds its own stop to a couple of seconds, so the grace period is only a safety
net); if `run` itself is killed, the children get SIGTERM from the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mirrorline.core.backoff import Backoff

log = logging.getLogger(__name__)

CONFIG_ERROR_EXIT = 2
HEALTHY_AFTER_S = 60.0


@dataclass(frozen=True)
class ChildSpec:
    name: str
    args: tuple[str, ...]  # arguments after `python -m mirrorline`


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM if the supervisor dies without stopping us
    (killed with SIGKILL, say), so no service outlives `mirrorline run` as an orphan."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _ended(code: int) -> str:
    """How a child ended, from its exit status (negative: the signal that killed it)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class Supervisor:
    def __init__(self, children: Sequence[ChildSpec], *, grace_s: float = 10.0,
                 backoff: Backoff | None = None) -> None:
        self._children = list(children)
        self._grace_s = grace_s
        self._backoff = backoff or Backoff(initial=1.0, maximum=60.0)
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._stopping = asyncio.Event()
        self.exit_status = 0
        self.restarts: dict[str, int] = {c.name: 0 for c in children}

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        keepers = [asyncio.create_task(self._keep(c), name=c.name) for c in self._children]
        await self._stopping.wait()
        log.info("stopping %d services", len(self._procs))
        await self._terminate_all()
        await asyncio.gather(*keepers, return_exceptions=True)
        return self.exit_status

    def stop(self) -> None:
        self._stopping.set()

    async def _keep(self, child: ChildSpec) -> None:
        attempt = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "mirrorline",
                                                        *child.args,
                                                        preexec_fn=_die_with_parent)
            self._procs[child.name] = proc
            log.info("%s started (pid %d)", child.name, proc.pid)
            code = await proc.wait()
            self._procs.pop(child.name, None)
            if self._stopping.is_set():
                return
            if code == CONFIG_ERROR_EXIT:
                log.error("%s exited with status 2: it cannot run as configured (its line "
                          "above says why: a configuration error, a port it cannot listen "
                          "on); restarting cannot help, so every service stops", child.name)
                self.exit_status = CONFIG_ERROR_EXIT
                self._stopping.set()
                return
            if time.monotonic() - started >= HEALTHY_AFTER_S:
                attempt = 0
            delay = self._backoff.delay(attempt)
            attempt += 1
            self.restarts[child.name] += 1
            if code == 0:
                # A clean exit `run` did not ask for: someone stopped the service (a
                # SIGTERM from an operator or a tool). Nothing failed.
                log.warning("%s stopped (status 0; not asked to by run); restarting in %.1fs",
                            child.name, delay)
            else:
                log.error("%s %s; restarting in %.1fs", child.name, _ended(code), delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _terminate_all(self) -> None:
        procs = list(self._procs.values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), self._grace_s)
        except TimeoutError:
            for proc in procs:
                if proc.returncode is None:
                    log.warning("pid %d did not stop within %.0fs; killing it", proc.pid,
                                self._grace_s)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.gather(*(p.wait() for p in procs))
