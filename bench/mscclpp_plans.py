"""MSCCL++ execution plans against the same algorithms as MSCCL-IR, in the simulator (collsynth.sim for the IR,
collsynth.sim.mscclpp for the plan; one set of link tables), on ndv4 and h100_nvswitch; then the
switch-channel 2PA against the memory-channel 2PA.

    nice .venv/bin/python bench/mscclpp_plans.py
    nice .venv/bin/python bench/mscclpp_plans.py --topology h100_nvswitch --sizes 1KB,1MB
    nice .venv/bin/python bench/mscclpp_plans.py --lowered   # also every library AllReduce: IR vs its lowered plans

Prints predicted times (us) per size: the IR's, the plan's and the plan's cut (1 - plan / IR), and the wall time of
building (compile, lower, interpret) every plan. Times are model predictions, not measurements.
"""

from __future__ import annotations

import argparse
import time

from collsynth.catalog.export_mscclpp import choose_per_size, mscclpp_plans
from collsynth.core.units import format_size, parse_size
from collsynth.sim import simulate
from collsynth.sim.mscclpp import simulate_plan
from collsynth.topologies.io import resolve_topology

DEFAULT_SIZES = "1KB,32KB,1MB,64MB,1GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", action="append", help="topology (repeatable; default ndv4 and h100_nvswitch)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help=f"comma-separated sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--lowered", action="store_true",
                        help="also every library AllReduce program: its best MSCCL-IR protocol vs its best plan")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    print(f"{'topology':<14} {'algorithm':<20} {'size':>6} {'MSCCL-IR us':>12} {'plan us':>10} {'cut':>7}")
    for name in args.topology or ["ndv4", "h100_nvswitch"]:
        topology = resolve_topology(name)
        started = time.perf_counter()
        plans = mscclpp_plans(topology)
        built = time.perf_counter() - started
        plan_rows = {}
        for item in plans:
            planned = simulate_plan(item.plan, topology, sizes).rows
            plan_rows[item.variant.name] = planned
            compiled = simulate(item.ir, topology, sizes).rows if item.ir is not None else None
            for k, size in enumerate(sizes):
                ir_us = f"{compiled[k].time_us:12.2f}" if compiled else f"{'-':>12}"
                cut = f"{1 - planned[k].time_us / compiled[k].time_us:7.0%}" if compiled else f"{'-':>7}"
                print(f"{name:<14} {item.variant.name:<20} {format_size(size):>6} {ir_us} "
                      f"{planned[k].time_us:10.2f} {cut}")
        if "mscclpp_2pa_switch" in plan_rows:
            switch, memory = plan_rows["mscclpp_2pa_switch"], plan_rows["mscclpp_2pa_memory"]
            for k, size in enumerate(sizes):
                print(f"{name:<14} {'switch vs memory 2PA':<20} {format_size(size):>6} busbw "
                      f"{switch[k].busbw_GBps:8.1f} vs {memory[k].busbw_GBps:8.1f} GB/s "
                      f"({switch[k].busbw_GBps / memory[k].busbw_GBps - 1:+.0%})")
        for choice in choose_per_size(topology, sizes):
            print(f"{name:<14} {'pick':<20} {format_size(choice.size_bytes):>6} {choice.name} as "
                  f"{'plan' if choice.runtime == 'mscclpp' else 'MSCCL-IR'} ({choice.time_us:.2f} us)")
        print(f"# {name}: built, lowered and interpreted {len(plans)} plans in {built:.1f} s (wall, machine shared)")
        if args.lowered:
            lowered_table(topology, sizes)


def lowered_table(topology, sizes: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Per library AllReduce program: the fastest of its MSCCL-IR protocols against the fastest of its lowered
    plans (collsynth.tune.backend.lowered_plans: Simple/LL x threadblock groupings, each interpreter-checked)."""
    from dataclasses import replace

    from collsynth.algorithms.registry import library_programs
    from collsynth.compiler import compile_program
    from collsynth.tune.backend import lowered_plans, plan_times

    print(f"{'topology':<14} {'program':<38} {'size':>6} {'best IR us':>11} {'best plan us':>13} {'plan vs IR':>10}")
    for program_name, program in library_programs(topology, "allreduce"):
        ir = compile_program(program)
        ir_rows = [simulate(replace(ir, proto=p), topology, sizes).rows for p in ("Simple", "LL", "LL128")]
        plans, _ = lowered_plans(ir, topology, program_name)
        times = plan_times(plans, topology, sizes)
        for k, size in enumerate(sizes):
            best_ir = min(rows[k].time_us for rows in ir_rows)
            best_plan = min(t[k] for t in times.values()) if times else float("inf")
            print(f"{topology.name:<14} {program_name:<38} {format_size(size):>6} {best_ir:11.2f} {best_plan:13.2f} "
                  f"{best_plan / best_ir - 1:+10.0%}")


if __name__ == "__main__":
    main()
