"""Start-up of `collsynth --help` (issue 16 target: under 0.15 s): fresh processes, min and median of the wall time
and of the CPU time (user + sys of the child: what load on a shared machine inflates least), next to a bare
interpreter and `import click`, for each install given (a venv's bin folder; default: this interpreter's). Rows of
one install run interleaved with the others', so load changes hit every install alike.

    nice .venv/bin/python bench/startup.py [--runs N] [--subcommands] [BIN_DIR ...]

An editable install (`pip install -e`) runs its import finder in `site` (~30 ms: it imports pathlib); a regular
install (`pip install .`, what users get) does not, so give both to see the difference. Since this project
declares `package-dir = {"" = "."}`, setuptools makes its editable install a plain .pth path entry (no finder)."""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one_run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def commands(bin_dir: Path, subcommands: bool) -> list[tuple[str, list[str]]]:
    python, script = str(bin_dir / "python"), str(bin_dir / "collsynth")
    rows = [("python -c pass", [python, "-c", "pass"]), ("python -c 'import click'", [python, "-c", "import click"]),
            ("collsynth --help", [script, "--help"])]
    return rows + ([("collsynth synth --help", [script, "synth", "--help"])] if subcommands else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bins", nargs="*", type=Path, help="venv bin folders (default: this interpreter's)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--subcommands", action="store_true",
                        help="also `collsynth synth --help` (needs the install's dependencies)")
    args = parser.parse_args()
    bins = args.bins or [Path(sys.executable).parent]
    # bytecode cached as after an install (this checkout may run with PYTHONDONTWRITEBYTECODE set)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    table = {(b, label): command for b in bins for label, command in commands(b, args.subcommands)}
    for key, command in list(table.items()):  # a warm-up run each; a command that fails is left out, said so
        failed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
        if failed.returncode != 0:
            reason = (failed.stderr.strip().splitlines() or ["no message"])[-1]
            print(f"left out: {key[0].parent.name} `{key[1]}` (exit {failed.returncode}: {reason})")
            del table[key]
    times: dict[tuple[Path, str], list[tuple[float, float]]] = {key: [] for key in table}
    load = os.getloadavg()[0]
    for _ in range(args.runs):
        for key, command in table.items():
            times[key].append(one_run(command, env))
    print(f"{args.runs} runs each; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after, "
          f"{os.cpu_count()} cores")
    print("| install | command | wall min ms | wall median ms | CPU min ms | CPU median ms |\n"
          "|---|---|---:|---:|---:|---:|")
    for (bin_dir, label), runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"| {bin_dir.parent.name} | `{label}` | {min(walls) * 1e3:.0f} | {statistics.median(walls) * 1e3:.0f} "
              f"| {min(cpus) * 1e3:.0f} | {statistics.median(cpus) * 1e3:.0f} |")


if __name__ == "__main__":
    main()
