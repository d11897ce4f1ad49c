"""A hand-written campaign of bad inputs over every command (issue 16's targets: 0 tracebacks, 0 hangs over
10 s, 0 bad inputs accepted). Run: `.venv/bin/python -m tests.fuzz.hand_campaign` from the repository root;
prints one line per case that is not a clean refusal and the counts.

A clean refusal is exit 2 with exactly one `error:` line and no traceback (or, for `run`, its FAIL verdict with
exit 1: an IR the interpreter refuses). Every case is bad input by construction, so an exit 0 counts as accepted
garbage."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from collsynth.cli import main
from collsynth.collectives import make_collective
from collsynth.topologies import ring

HANG_S = 10


class Hang(Exception):
    pass


def _files(tmp: Path) -> dict[str, str]:
    from collsynth.algorithms import LIBRARY, suggested_parameters
    from collsynth.compiler import compile_program
    from collsynth.emit.msccl_xml import write_xml

    entry = LIBRARY["ring_allgather"]
    xml = tmp / "ring.xml"
    write_xml(compile_program(entry.builder(ring(4), **suggested_parameters(entry, ring(4)))), xml)
    text = xml.read_text()
    paths = {"xml": str(xml)}
    for name, data in {
        "topo_nan": json.dumps(ring(4).to_dict()).replace('"alpha_us": 0.7', '"alpha_us": NaN', 1),
        "topo_str_ranks": json.dumps({**ring(4).to_dict(), "num_ranks": "4"}),
        "topo_typo": json.dumps({**ring(4).to_dict(), "swiches": []}),
        "coll_zero": json.dumps({**make_collective("allgather", 4).to_dict(), "chunks": 0}),
        "coll_float": json.dumps({**make_collective("allgather", 4).to_dict(), "num_ranks": 4.5}),
        "deep": "[" * 100000,
        "not_json": "{'a': 1}",
        "empty": "",
        "xml_extra_attr": text.replace('<step s="0"', '<step s="0" colour="red"', 1),
        "xml_float": text.replace(' cnt="1"', ' cnt="1.0"', 1),
        "xml_proto": text.replace('proto="Simple"', 'proto="Fast"', 1),
        "xml_huge": text.replace('nchunksperloop="', 'nchunksperloop="9', 1),
        "xml_root": "<graph/>",
        "plan_typo": '[[target]]\ntopology = "ring:4"\ncollectives = ["allgather"]\n',
        "plan_float": '[limits]\nmax_chunks = 2.5\n[[targets]]\ntopology = "ring:4"\ncollectives = ["allgather"]\n',
        "plan_bad_inplace": '[compile]\ninplace = "no"\n[[targets]]\ntopology = "ring:4"\n'
                            'collectives = ["allgather"]\n',
        "sketch_str": json.dumps({"chunkup": "2"}),
        "sketch_typo": json.dumps({"nodes": 1, "chunk_up": 2}),
        "algo_fmt": json.dumps({"format": "collsynth.algorithm/2"}),
        "binary": "\udcff",
    }.items():
        path = tmp / f"{name}.{'xml' if name.startswith('xml') else 'toml' if name.startswith('plan') else 'json'}"
        path.write_bytes(data.encode("utf-8", "surrogateescape"))
        paths[name] = str(path)
    (tmp / "afile").write_text("x")
    paths["afile"] = str(tmp / "afile")
    return paths


def cases(f: dict[str, str]) -> list[list[str]]:
    x = f["xml"]
    bad_topologies = [f["topo_nan"], f["topo_str_ranks"], f["topo_typo"], f["deep"], f["not_json"], f["empty"],
                      f["binary"], "/dev/zero", "ring:0", "ring:-1", "ring:x", "torus:0x4", "nosuch", "ring:999999",
                      "fully_connected:100000"]
    out: list[list[str]] = []
    out += [["topo", "show", t] for t in bad_topologies]
    out += [["topo", "draw", "ring:4", "-o", "/dev/full"], ["topo", "draw", "fully_connected:2000", "-o", "x.png"]]
    for t in bad_topologies[:8]:
        out.append(["synth", "instance", t, "allgather", "-c", "1", "-s", "2"])
    for bad in (["-c", "0"], ["-c", "x"], ["-c", "1000000"], ["-s", "100000"], ["-s", "-1"], ["-r", "0"],
                ["--time-limit", "nan"], ["--time-limit", "inf"], ["--time-limit", "-1"], ["--root", "-1"],
                ["--root", "99"], ["-o", "/proc/x.json"], ["-o", f["afile"] + "/x.json"], ["-o", "/dev/full"]):
        out.append(["synth", "instance", "ring:4", "allgather", "-c", "1", "-s", "2", *bad])
    for coll in (f["coll_zero"], f["coll_float"], f["deep"], "nosuch", "/dev/zero"):
        out.append(["synth", "instance", "ring:4", coll, "-c", "1", "-s", "2"])
    out += [["synth", "least-steps", "ring:4", "allgather", "-r", "1", "--max-steps", "200"],
            ["synth", "least-steps", "ring:16", "allgather", "-r", "2", "--max-steps", "200"],
            ["synth", "least-steps", "ring:8", "allgather", "--max-steps", "1"],
            ["synth", "least-steps", "ring:4", "allgather", "--max-steps", "5000"],
            ["synth", "least-steps", "ring:4", "allgather", "-o", "/dev/full"],
            ["synth", "pareto", "ring:4", "allgather", "--max-chunks", "0"],
            ["synth", "pareto", "ring:4", "allgather", "--jobs", "0"],
            ["synth", "pareto", "ring:4", "allgather", "--report", f["afile"]],
            ["synth", "pareto", "ring:4", "allgather", "--report", "/proc/rep"],
            ["synth", "pareto", "ring:4", "allgather", "--call-time-limit", "nan"]]
    for sketch in (f["sketch_str"], f["sketch_typo"], f["deep"], "/dev/zero", "missing.json"):
        out.append(["synth", "milp", "ndv2", "allgather", "--sketch", sketch])
    out += [["synth", "milp", "ndv2", "allgather", "--sketch", f["sketch_str"], "-o", "/dev/full"],
            ["synth", "milp", "ndv2", "allgather", "--sketch", f["sketch_str"], "--gap", "-1"],
            ["synth", "milp", "ndv2", "allgather", "--sketch", f["sketch_str"], "--time-limit", "0"]]
    for command in ("greedy", "auto", "trees"):
        out += [["synth", command, "ring:4", "allgather", "--size", "lots"],
                ["synth", command, "ring:4", "allgather", "-o", "/dev/full"],
                ["synth", command, f["topo_nan"], "allgather"],
                ["synth", command, "ring:4", "nosuch"]]
    out += [["lower", f["algo_fmt"]], ["lower", f["deep"]], ["lower", "/dev/zero"], ["lower", f["binary"]],
            ["compile", "/dev/zero"], ["compile", f["not_json"]], ["compile", f["empty"]],
            ["algorithms", "show", "nosuch"], ["algorithms", "show", "ring_allgather", "--ranks", "100000"],
            ["algorithms", "show", "ring_allgather", "--ranks", "0"],
            ["algorithms", "show", "ring_allgather", "-o", "/dev/full"]]
    for xml in (f["xml_extra_attr"], f["xml_float"], f["xml_proto"], f["xml_huge"], f["xml_root"], f["deep"],
                "/dev/zero", f["binary"]):
        out += [["run", xml], ["sim", xml, "--topology", "ring:4"], ["export", "chakra", xml, "-o", "chakra_out"]]
    out += [["run", x, "--seed", "-1"], ["run", x, "--size", "64GB"], ["run", x, "--size", "-1"],
            ["run", x, "--root", "-1"], ["sim", x, "--topology", "ring:4", "--sizes", "nan"],
            ["sim", x, "--topology", f["topo_nan"]], ["sim", x, "--topology", "ring:4", "--plot", "/dev/full"],
            ["export", "mscclpp", x, "-o", "/dev/full"], ["doctor", x, "--size", "lots"],
            ["doctor", x, "--nranks", "0"], ["doctor", "/dev/zero"]]
    for plan in (f["plan_typo"], f["plan_float"], f["plan_bad_inplace"], f["deep"], "/dev/zero", f["binary"]):
        out.append(["catalog", "build", plan, "--db", "c.db"])
    out += [["catalog", "best", "ring:4", "allgather", "lots", "--db", "c.db"],
            ["catalog", "export", "--msccl", "/proc/out", "--db", "c.db"],
            ["catalog", "show", "zzzz", "--db", "/dev/zero"],
            ["regress", "--baseline", "typo.json"], ["regress", "--suite", f["plan_typo"]],
            ["regress", "--report", "/proc/rep"], ["regress", "--jobs", "0"],
            ["tune", "ring:4", "allgather", "--sizes", "lots"], ["tune", "ring:4", "nosuch"],
            ["tune", "ring:4", "allgather", "-a", f["algo_fmt"]],
            ["tune", "ring:4", "allgather", "--report", "/proc/r"],
            ["tune", f["topo_nan"], "allgather"]]
    return out


def run_case(runner: CliRunner, args: list[str]) -> tuple[str, str]:
    def alarm(signum: int, frame: Any) -> None:
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        result = runner.invoke(main, args, catch_exceptions=True)
    except Hang:
        return "hang", ""
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if isinstance(result.exception, Hang):
        return "hang", ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback", repr(result.exception)[:200]
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code == 0:
        return "accepted", result.output[-200:]
    if result.exit_code == 2 and len(errors) == 1 and errors[0].startswith("error: "):
        return "clean", errors[0]
    if result.exit_code == 1 and args[0] == "run" and result.stdout.startswith("FAIL "):
        return "clean", result.stdout.splitlines()[0]  # `run`'s verdict: the interpreter refuses the program
    return f"exit {result.exit_code}", " | ".join(errors)[:300]


def main_campaign() -> int:
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        files = _files(Path(tmp))
        os.chdir(tmp)
        try:
            runner = CliRunner()
            all_cases = cases(files)
            for args in all_cases:
                outcome, detail = run_case(runner, args)
                counts[outcome] += 1
                if outcome != "clean":
                    print(f"{outcome}: collsynth {' '.join(args)} -> {detail}")
        finally:
            os.chdir(cwd)
    print(f"{sum(counts.values())} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if set(counts) <= {"clean"} else 1


if __name__ == "__main__":
    sys.exit(main_campaign())
