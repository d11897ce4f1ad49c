"""Run a collsynth command in a fresh process, stop it with a signal at a known moment, and report what it
left: exit code, stderr, the processes it had started that are still alive, and leaked-semaphore warnings.

The moment is made deterministic by a hook (Python source run before the command) that wraps a function of
the pipeline: the wrapper does its real work, prints `ready`, and sleeps, so the signal lands while the command
is busy with finished work behind it. SIGINT goes to the whole process group (as a terminal's Ctrl-C does),
SIGTERM to the command's process only (as `kill` or a scheduler does)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stopped:
    returncode: int
    stdout: str
    stderr: str
    survivors: tuple[int, ...]  # processes the command started that outlived it


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (via /proc), zombies excluded."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2:].split()[0] != "Z"


def stop_command(hook: str, args: list[str], signum: int, *, cwd: Path, delay: float = 0.0,
                 timeout: float = 120.0) -> Stopped:
    """Run `hook` then `collsynth ARGS` in a new session; on the hook's `ready` line (after `delay` s) send
    `signum`; wait for the end (and for the processes it had started)."""
    # A runner without job control (a background CI step, `nohup`) may start us with SIGINT ignored, and Python
    # keeps an ignored SIGINT; a terminal's Ctrl-C reaches a process with the default handler, so restore it.
    code = ("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n" + textwrap.dedent(hook)
            + f"\nfrom collsynth.cli import main\nmain({args!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, start_new_session=True)
    assert proc.stdout is not None
    lines = []
    while (line := proc.stdout.readline()) and line.strip() != "ready":
        lines.append(line)
    assert line, f"the command ended before it was ready: {proc.communicate(timeout=timeout)}"
    time.sleep(delay)
    started = descendants(proc.pid)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=timeout)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)  # a child may take a moment to exit after its parent
    survivors = tuple(sorted(pid for pid in started if _alive(pid)))
    for pid in survivors:  # never leave them behind, even when the test fails
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return Stopped(proc.returncode, "".join(lines) + out, err, survivors)


def sleep_after(module: str, name: str, *, calls: int = 1, before: bool = False) -> str:
    """Hook source: `module.name` does its work; after its `calls`-th call (with `before`: at the start of that
    call, the earlier calls finished) it prints `ready` and sleeps."""
    return f"""
        import importlib, time
        _module = importlib.import_module({module!r})
        _real = getattr(_module, {name!r})
        _count = []
        def _hold():
            print("ready", flush=True)
            time.sleep(60)
        def _hooked(*args, **kwargs):
            _count.append(1)
            if {before!r} and len(_count) == {calls}:
                _hold()
            result = _real(*args, **kwargs)
            if not {before!r} and len(_count) == {calls}:
                _hold()
            return result
        setattr(_module, {name!r}, _hooked)
        """
