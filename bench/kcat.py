"""Contender: `kcat -C | kcat -P`, one pipe per partition -- librdkafka at both ends, no Python.

Records travel as `key<TAB>value<NL>` lines (the generated payloads are printable and contain
neither), so keys and values arrive intact; kcat cannot carry headers or source timestamps
through a pipe, so the target gets fresh timestamps. Debian's librdkafka (2.0) cannot talk
to Tansu, so kcat runs against the librdkafka shipped in the confluent-kafka wheel, through
`LD_LIBRARY_PATH` and a `librdkafka.so.1` symlink. In a steady-rate run (`env.follow`) the
consumers keep following the partition instead of stopping at its end, and write each
record out at once (`-u`). On a compressed source topic the consumers decompress and the
producers compress again with the source's codec (`-X compression.codec=...`). Its CPU
figure is the eight processes' together.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import time
from pathlib import Path

from bench.common import BenchEnv, ContenderUnavailable, ProcessCost

#: kcat parses these escapes itself: a tab between key and value, a newline after each record.
CONSUME_FORMAT = "%k\\t%s\\n"
KEY_DELIMITER = "\\t"

_prepared: tuple[str, Path] | None = None


async def run(env: BenchEnv) -> float:
    kcat, libdir = await _prepare(env.workdir)
    proc_env = dict(os.environ)
    proc_env["LD_LIBRARY_PATH"] = ":".join(
        filter(None, [str(libdir), os.environ.get("LD_LIBRARY_PATH")]))
    started = time.perf_counter()
    cost = ProcessCost(reaped_here=True)  # the consumers end at the partition's end
    pipes = [asyncio.ensure_future(_pipe(kcat, env, p, proc_env, cost.pids))
             for p in range(env.partitions)]
    try:
        return await env.wait_mirrored(started, watch=pipes, cost=cost)
    finally:
        for pipe in pipes:
            if not pipe.done():
                pipe.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)


async def _pipe(kcat: str, env: BenchEnv, partition: int, proc_env: dict[str, str],
                pids: list[int]) -> None:
    read_end, write_end = os.pipe()
    try:
        consumer = await asyncio.create_subprocess_exec(
            kcat, "-C", "-q", "-b", env.source_bootstrap, "-t", env.source_topic,
            "-p", str(partition), "-o", "beginning", "-f", CONSUME_FORMAT,
            # In a steady-rate run: keep following, and write each record out at once
            # rather than when stdio's buffer fills. Otherwise stop at the end.
            *(("-u",) if env.follow else ("-e",)),
            stdout=write_end, stderr=asyncio.subprocess.PIPE, env=proc_env,
        )
        pids.append(consumer.pid)
        producer = await asyncio.create_subprocess_exec(
            kcat, "-P", "-q", "-b", env.target_bootstrap, "-t", env.target_topic,
            "-p", str(partition), "-K", KEY_DELIMITER,
            *(("-X", f"compression.codec={env.codec}") if env.codec != "none" else ()),
            stdin=read_end, stderr=asyncio.subprocess.PIPE, env=proc_env,
        )
        pids.append(producer.pid)
    finally:
        os.close(read_end)
        os.close(write_end)
    try:
        for role, proc in (("consumer", consumer), ("producer", producer)):
            _, err = await proc.communicate()
            if proc.returncode != 0:
                tail = err.decode(errors="replace").strip().splitlines()[-1:]
                raise RuntimeError(
                    f"kcat {role} for partition {partition} exited {proc.returncode}: {tail}")
    finally:
        for proc in (consumer, producer):
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def _prepare(workdir: Path) -> tuple[str, Path]:
    """kcat (installed with apt-get if missing) and a directory holding the wheel's librdkafka."""
    global _prepared
    if _prepared is None:
        kcat = await _ensure_kcat()
        libdir = await asyncio.to_thread(_link_librdkafka, workdir / "kcat-lib")
        print(f"  kcat: {await _version(kcat, libdir)}", flush=True)
        _prepared = (kcat, libdir)
    return _prepared


async def _ensure_kcat() -> str:
    found = shutil.which("kcat")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ContenderUnavailable("kcat is not installed (install the Debian package 'kcat')")
    print("  kcat missing: apt-get install -y kcat ...", flush=True)
    problem = ""
    for step in (["install", "-y", "kcat"], ["update"], ["install", "-y", "kcat"]):
        proc = await asyncio.create_subprocess_exec(
            "apt-get", "-q", *step,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        _, err = await proc.communicate()
        problem = (err.decode(errors="replace").strip().splitlines() or [problem])[-1]
        found = shutil.which("kcat")
        if found:
            return found
    raise ContenderUnavailable(f"kcat could not be installed with apt-get: {problem}")


def _link_librdkafka(libdir: Path) -> Path:
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or spec.origin is None:
        raise ContenderUnavailable("confluent-kafka is not installed (its librdkafka is needed)")
    bundled = sorted(Path(spec.origin).parent.parent.glob("confluent_kafka.libs/librdkafka*.so*"))
    if not bundled:
        raise ContenderUnavailable(
            "no librdkafka in the confluent-kafka wheel; Debian's cannot talk to Tansu")
    libdir.mkdir(parents=True, exist_ok=True)
    link = libdir / "librdkafka.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(bundled[0])
    return libdir


async def _version(kcat: str, libdir: Path) -> str:
    proc = await asyncio.create_subprocess_exec(
        kcat, "-V", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "LD_LIBRARY_PATH": str(libdir)},
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    match = re.search(r"Version (\S+) .*librdkafka (\S+)", text)
    if proc.returncode != 0 or match is None:
        raise ContenderUnavailable(f"kcat -V failed: {text.strip()[-200:]}")
    return f"kcat {match[1]} with librdkafka {match[2]} (from the confluent-kafka wheel)"
