"""Start-up of `collsynth --help` (issue 16 target: under 0.15 s): 20 fresh processes each, min and median of
the wall time and of the CPU time (user + sys of the child: what load on a shared machine inflates least), next
to a bare interpreter. Run from the repository root: `nice .venv/bin/python bench/startup.py [RUNS]`."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def measure(command: list[str], env: dict[str, str], runs: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return walls, cpus


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    python = Path(sys.executable)
    script = python.parent / "collsynth"
    # bytecode cached as after an install (this checkout may run with PYTHONDONTWRITEBYTECODE set)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(python), "-c", "import collsynth.cli"], env=env, check=True)
    rows = [("python -c pass", [str(python), "-c", "pass"]),
            ("collsynth --help", [str(script), "--help"]),
            ("collsynth synth --help", [str(script), "synth", "--help"])]
    load = os.getloadavg()[0]
    print(f"{runs} runs each; load average {load:.1f} on {os.cpu_count()} cores")
    print("| command | wall min ms | wall median ms | CPU min ms | CPU median ms |\n|---|---:|---:|---:|---:|")
    for label, command in rows:
        walls, cpus = measure(command, env, runs)
        print(f"| `{label}` | {min(walls) * 1e3:.0f} | {statistics.median(walls) * 1e3:.0f} | "
              f"{min(cpus) * 1e3:.0f} | {statistics.median(cpus) * 1e3:.0f} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
