"""Chakra ET export speed: 128-rank ring AllReduce (target < 0.5 s; Chakra's own converter: 6.2 s).

    .venv/bin/python bench/chakra.py

Times `export_chakra` (build every rank's nodes, serialize, write 128 files atomically) on a hand-built
ring AllReduce IR (bench/sim.py's builder), then reads every file back to count nodes.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim import ring_allreduce_ir  # noqa: E402  (bench/sim.py, next to this file)

from collsynth.emit.chakra import export_chakra, read_chakra  # noqa: E402

REPEATS = 5


def main() -> None:
    console = Console(highlight=False, width=140)
    table = Table(title=f"export_chakra(): ring AllReduce, 1 GB per rank (wall seconds, {REPEATS} runs)",
                  title_justify="left")
    for column in ("ranks", "IR steps", "nodes", "bytes written", "best s", "median s", "read back s"):
        table.add_column(column, justify="right")
    for n in (8, 64, 128):
        ir = ring_allreduce_ir(n)
        times = []
        with tempfile.TemporaryDirectory(prefix="collsynth_chakra_") as out:
            for _ in range(REPEATS):
                start = time.perf_counter()
                paths = export_chakra(ir, out, "ring", nbytes=1 << 30)
                times.append(time.perf_counter() - start)
            start = time.perf_counter()
            nodes = sum(len(read_chakra(path)[1]) for path in paths)
            read_s = time.perf_counter() - start
            written = sum(path.stat().st_size for path in paths)
        table.add_row(str(n), str(ir.num_steps), str(nodes), str(written), f"{min(times):.3f}",
                      f"{statistics.median(times):.3f}", f"{read_s:.3f}")
    console.print(table)


if __name__ == "__main__":
    main()
