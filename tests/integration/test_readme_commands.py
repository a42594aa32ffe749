"""Every command in the README runs as written after its two set-up commands.

The README's `sh` blocks are run in order as one bash script, in a fresh directory, with
`set -e`: a command that rots (a renamed option, a subcommand gone, a configuration the
check refuses, a `run` whose controller never serves) fails this test. What differs from a
user's shell, and why:

- `make TARGET` lines are dry runs (`make -n` in the repository): `make test` is this very
  suite and `make demo` a minute of its own; the dry run proves the target exists and what
  it would run. `source .venv/bin/activate` is run for real, against the virtualenv these
  tests run from (linked as `.venv` in the directory), so `mirrorline` must come from
  there.
- Ports: the suite shares its host, so the local clusters get free ports instead of 19092
  and 29092 (`dev brokers up primary=P backup=Q`), `run` gets a free `--port-offset N`
  (the health loop's port and `admin status`'s server move with it), and the brokers'
  state lives in the test's directory (`MIRRORLINE_STATE_DIR`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from pathlib import Path

from procs import free_port

from mirrorline.ports import GRPC_PORTS, run_ports

ROOT = Path(__file__).parents[2]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)


def _free_offset() -> int:
    """A --port-offset whose every port of `mirrorline run` is free now."""
    import socket

    while True:
        offset = free_port() % 20000 + 20000
        try:
            for port in run_ports(2, offset).values():
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return offset


def as_run_here(script: str, *, primary: int, backup: int, offset: int) -> str:
    """The README's commands with this host's ports (see the module docstring)."""
    controller = GRPC_PORTS["controller"]
    lines = []
    for line in script.splitlines():
        command = line.split("#", 1)[0].strip()
        if command.startswith("make "):
            line = f"make -n -C {ROOT} {command.removeprefix('make ')} >/dev/null"
        elif command == "mirrorline dev brokers up":
            line = f"mirrorline dev brokers up primary={primary} backup={backup}"
        elif command.startswith("mirrorline run "):
            line = line.replace(command, f"{command.removesuffix('&').strip()} "
                                         f"--port-offset {offset} &")
        line = line.replace(f"--port {controller}", f"--port {controller + offset}")
        lines.append(line.replace("127.0.0.1:19092", f"127.0.0.1:{primary}")
                     .replace("127.0.0.1:29092", f"127.0.0.1:{backup}"))
    return "\n".join(lines) + "\n"


def shell_env(tmp_path: Path, offset: int) -> dict[str, str]:
    """This environment without the tests' virtualenv on PATH (`source .venv/bin/activate`
    must put `mirrorline` there), with the brokers' state in `tmp_path` and `admin`
    pointed at the moved controller port."""
    here = Path(sys.executable).parent.resolve()
    env = {k: v for k, v in os.environ.items() if k not in ("MIRRORLINE_SERVER", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and Path(p).resolve() != here)
    env["MIRRORLINE_STATE_DIR"] = str(tmp_path / "state")
    env["MIRRORLINE_SERVER"] = f"127.0.0.1:{GRPC_PORTS['controller'] + offset}"
    return env


def test_the_readme_has_the_commands_a_newcomer_needs() -> None:
    text = (ROOT / "README.md").read_text()
    commands = "\n".join(shell_blocks(text))
    for needed in ("make install", "source .venv/bin/activate", "make demo", "make test",
                   "mirrorline run --config", "mirrorline admin status"):
        assert needed in commands, f"the README shows no `{needed}` to run"
    # The configuration the commands write is the one the README shows.
    [shown] = re.findall(r"^```properties\n(.*?)^```", text, flags=re.S | re.M)
    assert f"<<'EOF'\n{shown}EOF\n" in commands


async def test_every_command_in_the_readme_runs_as_written(tmp_path: Path) -> None:
    blocks = shell_blocks((ROOT / "README.md").read_text())
    primary, backup, offset = free_port(), free_port(), _free_offset()
    script = "set -e\n" + "".join(
        as_run_here(block, primary=primary, backup=backup, offset=offset) for block in blocks)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    assert (tmp_path / ".venv" / "bin" / "activate").exists(), (
        "the tests do not run from a virtualenv: run them with `make test`")
    (tmp_path / "readme.sh").write_text(script)
    env = shell_env(tmp_path, offset)
    process = await asyncio.create_subprocess_exec(
        "bash", "readme.sh", cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 120)
    finally:
        # The whole session: a script that stopped early (set -e) leaves `mirrorline run`
        # and its services behind it, still running, whatever bash's own exit status.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        down = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mirrorline", "dev", "brokers", "down", env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        await down.wait()
    text = out.decode(errors="replace")
    assert process.returncode == 0, text
    # `admin status` answered: the controller's line, then the flow's.
    assert "(epoch " in text and "primary->backup" in text, text
    assert "Traceback" not in text, text
