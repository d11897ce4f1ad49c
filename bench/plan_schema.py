"""CPU cost of checking an MSCCL++ execution plan (`check_plan`: the declared schema, then the cross-field
checks), per plan and per op, on ring AllReduce plans of growing size.

    nice .venv/bin/python bench/plan_schema.py [--checker FILE.py]

`--checker` loads `check_plan` from another file instead (e.g. an earlier version, written out with
`git show REV:collsynth/emit/mscclpp_schema.py > /tmp/old.py`), to compare. CPU time (process_time), so a
loaded machine inflates it less than wall time."""

from __future__ import annotations

import argparse
import importlib.util
import time

from collsynth.emit.mscclpp import ir_to_plan
from collsynth.emit.mscclpp_schema import check_plan
from collsynth.runtime import samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checker", default=None, help="a file defining check_plan(plan) to time instead")
    args = parser.parse_args()
    check = check_plan
    if args.checker:
        spec = importlib.util.spec_from_file_location("other_checker", args.checker)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        check = module.check_plan
    print(f"{'ranks':>5} {'ops':>6} {'ms CPU / plan':>14} {'us CPU / op':>12}")
    for ranks in (8, 16, 32):
        plan = ir_to_plan(samples.ring_allreduce(ranks))
        ops = sum(len(tb["ops"]) for gpu in plan["gpus"] for tb in gpu["threadblocks"])
        check(plan)
        started, count = time.process_time(), 0
        while time.process_time() - started < 1.0:
            check(plan)
            count += 1
        seconds = (time.process_time() - started) / count
        print(f"{ranks:>5} {ops:>6} {1000 * seconds:>14.2f} {1e6 * seconds / ops:>12.2f}")


if __name__ == "__main__":
    main()
