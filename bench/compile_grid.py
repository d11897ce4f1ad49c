"""The tuner's compile alone: a fixed grid of 32 configurations (instances 1-4 x merge contiguous/stage x fusion x
pairing) of each synthesized DGX-1 AllGather / ReduceScatter entry, built through one fresh `Evaluator` per entry
(so its compile cache, `compile_program(reuse=)`, works as in a search). Prints the CPU seconds per entry as JSON.

    nice .venv/bin/python bench/compile_grid.py ALGORITHMS_DIR     # the folder bench/tune_speed.py --algorithms wrote
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from collsynth.schedule.algorithm import Algorithm
from collsynth.topologies import resolve_topology
from collsynth.tune import Evaluator
from collsynth.tune.candidates import algorithm_candidate
from collsynth.tune.space import Config


def main() -> None:
    folder = Path(sys.argv[1])
    dgx1 = resolve_topology("dgx1")
    cpu_s = {}
    for coll in ("allgather", "reducescatter"):
        for path in sorted(folder.glob(f"dgx1_{coll}_*.json")):
            cand = algorithm_candidate(Algorithm.load(path), dgx1, coll)
            configs = [Config(cand.name, "Simple", k, merge, fusion, pair) for k in (1, 2, 3, 4)
                       for merge in ("contiguous", "stage") for fusion in (True, False) for pair in (True, False)]
            evaluator = Evaluator(dgx1, [cand])
            start = time.process_time()
            for config in configs:
                evaluator._build(config)  # the compile alone, failures included (as the search meets them)
            cpu_s[cand.name] = round(time.process_time() - start, 3)
    print(json.dumps(cpu_s))


if __name__ == "__main__":
    main()
