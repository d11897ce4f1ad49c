"""The library against each runtime target: how many (program, shape, instances, protocol) cases the runtime's
loader would refuse as compiled without a target, and how many still after `compile_program(target=...)` splits
them, with compile times.

    .venv/bin/python bench/targets.py                    # msccl-executor and rccl, Simple/LL/LL128
    .venv/bin/python bench/targets.py --protocols Simple --check    # also run each split IR in the interpreter

Cases: every library program at 8, 16 and 64 ranks (multi-node ones on 2 or 8 nodes), plus the multi-node ones at
2x8 and 8x8, instances 1 and 2. Prints a table; the machine is shared, so times are inflated by its load.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import replace

from collsynth.algorithms import LIBRARY
from collsynth.compiler import compile_program, instance_collective
from collsynth.compiler.split import TargetLimitError, target_violation
from collsynth.topologies.library import fully_connected

NODES = {8: 2, 16: 2, 64: 8}


def cases():
    for name, entry in LIBRARY.items():
        for n in (8, 16, 64):
            if entry.fits(n, NODES[n]) is None:
                yield name, n, NODES[n] if entry.multi_node or name == "alltonext" else None
        if entry.multi_node:
            yield name, 16, 2
            yield name, 64, 8


def build(name: str, n: int, nodes: int | None, instances: int, protocol: str):
    topo = fully_connected(n)
    if nodes is not None:
        topo = replace(topo, machines=tuple(r // (n // nodes) for r in range(n)))
    params = {"channels": 2} if "channels" in LIBRARY[name].parameters else {}
    return LIBRARY[name].builder(topo, instances=instances, protocol=protocol, **params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=["msccl-executor", "rccl"])
    parser.add_argument("--protocols", nargs="+", default=["Simple", "LL", "LL128"])
    parser.add_argument("--check", action="store_true", help="run every split IR in the CPU interpreter")
    args = parser.parse_args()
    print(f"{'target':16} {'cases':>6} {'refused unsplit':>16} {'refused split':>14} {'split s':>8}  "
          "refused after split")
    for target in args.targets:
        counts: Counter[str] = Counter()
        refused: list[str] = []
        seconds = 0.0
        for name, n, nodes in cases():
            for instances in (1, 2):
                for protocol in args.protocols:
                    program = build(name, n, nodes, instances, protocol)
                    counts["cases"] += 1
                    if target_violation(compile_program(program), target) is not None:
                        counts["unsplit"] += 1
                    start = time.perf_counter()
                    try:
                        ir = compile_program(program, target=target)
                    except TargetLimitError:
                        refused.append(f"{name}:{n}x{instances}:{protocol}")
                        continue
                    finally:
                        seconds += time.perf_counter() - start
                    if args.check:
                        from collsynth.runtime import execute

                        coll = instance_collective(program.collective, program.instances)
                        result = execute(ir, nbytes=coll.input_chunks * 2 * 4, collective=coll)
                        assert result.passed, (name, n, instances, protocol)
        print(f"{target:16} {counts['cases']:>6} {counts['unsplit']:>16} {len(refused):>14} {seconds:>8.1f}  "
              f"{', '.join(refused)}")


if __name__ == "__main__":
    main()
