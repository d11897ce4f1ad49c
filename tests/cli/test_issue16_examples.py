"""The bad inputs listed in issue 16 (the campaign against 04afd0d), each now exit 2 with one `error:` line,
fast, with nothing deleted. Solver-free except two tiny SMT instances (ring:4, one chunk)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from collsynth.cli import main
from collsynth.collectives import make_collective
from collsynth.topologies import ring

TACCL = next((p for p in (Path(__file__).resolve().parents[2].parent / "shared/examples/taccl",
                          Path("/work/shared/examples/taccl")) if p.is_dir()), None)

PLAN = """[[targets]]
topology = "ring:4"
collectives = ["allgather"]
"""




def _write(tmp: Path, name: str, data: str | bytes) -> str:
    path = tmp / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def _topology(tmp: Path, **changes) -> str:
    doc = ring(4).to_dict()
    doc.update(changes)
    return _write(tmp, "topo.json", json.dumps(doc, allow_nan=True))


def _link(tmp: Path, **changes) -> str:
    doc = ring(4).to_dict()
    doc["links"][0].update(changes)
    return _write(tmp, "topo.json", json.dumps(doc, allow_nan=True))


def _collective(tmp: Path, **changes) -> str:
    doc = make_collective("allgather", 4, 2).to_dict()
    doc.update(changes)
    return _write(tmp, "coll.json", json.dumps(doc))


def _sketch(tmp: Path, chunkup: int) -> str:
    return _write(tmp, "sketch.json", json.dumps({"nnodes": 1, "intranode_sketch": {"strategy": "none"},
                                                  "symmetry_offsets": [], "hyperparameters": {"input_chunkup":
                                                                                              chunkup}}))


def _xml(tmp: Path, xml: Path, old: str, new: str) -> str:
    text = xml.read_text()
    assert old in text
    return _write(tmp, "bad.xml", text.replace(old, new, 1))


def _afile(tmp: Path) -> Path:
    path = tmp / "afile"
    path.write_text("keep")
    return path


def _fifo(tmp: Path) -> str:
    path = tmp / "fifo.json"
    os.mkfifo(path)
    return str(path)


# name -> (args(tmp, xml, algorithm_path)); every one must be exit 2 with one line
CASES = {
    "topology non-UTF-8": lambda t, x, a: ["topo", "show", _write(t, "t.json", b'{"name": "\xe9", "num_ranks": 2}')],
    "collective non-UTF-8": lambda t, x, a: ["run", str(x), "--collective", _write(t, "c.json", b"{\"\xff\": 1}")],
    "algorithm non-UTF-8": lambda t, x, a: ["lower", _write(t, "a.json", b"\xff\xfe{}")],
    "plan non-UTF-8": lambda t, x, a: ["catalog", "build", _write(t, "p.toml", b"name = \"\xe9\"\n" + PLAN.encode()),
                                       "--dry-run", "--db", str(t / "c.sqlite")],
    "'['*200000": lambda t, x, a: ["topo", "show", _write(t, "deep.json", "[" * 200000)],
    "send [\"x\",0,1,\"copy\"]": lambda t, x, a: ["lower", _edit_algorithm(t, a, ["x", 0, 1, "copy"])],
    "num_ranks Infinity": lambda t, x, a: ["topo", "show", _topology(t, num_ranks=float("inf"))],
    "collective chunks 0": lambda t, x, a: ["run", str(x), "--collective", _collective(t, chunks=0)],
    "--time-limit nan": lambda t, x, a: ["synth", "instance", "ring:4", "allgather", "-c1", "-s3", "--time-limit",
                                         "nan"],
    "run --seed -1": lambda t, x, a: ["run", str(x), "--seed", "-1"],
    "-o /proc/x.json": lambda t, x, a: ["algorithms", "show", "ring_allgather", "--ranks", "4", "-o", "/proc/x.json"],
    "--plot under a file": lambda t, x, a: ["sim", str(x), "-t", "ring:4", "-s", "1MB", "--plot",
                                            str(_afile(t) / "sub" / "p.png")],
    "num_ranks 10^9": lambda t, x, a: ["topo", "show", _topology(t, num_ranks=10**9)],
    "synth instance -c 1000000": lambda t, x, a: ["synth", "instance", "ring:4", "allgather", "-c", "1000000", "-s",
                                                  "3"],
    "synth instance -s 100000": lambda t, x, a: ["synth", "instance", "ring:4", "allgather", "-c", "1", "-s",
                                                 "100000"],
    "XML i_chunks 10^9": lambda t, x, a: ["run", _xml(t, x, 'i_chunks="2"', 'i_chunks="1000000000"')],
    "run --size 64GB": lambda t, x, a: ["run", str(x), "--size", "64GB"],
    "/dev/zero topology": lambda t, x, a: ["topo", "show", "/dev/zero"],
    "/dev/zero XML": lambda t, x, a: ["run", "/dev/zero"],
    "/dev/zero algorithm": lambda t, x, a: ["lower", "/dev/zero"],
    "/dev/zero plan": lambda t, x, a: ["catalog", "build", "/dev/zero", "--dry-run", "--db", str(t / "c.sqlite")],
    "/dev/zero collective": lambda t, x, a: ["run", str(x), "--collective", "/dev/zero"],
    "FIFO topology": lambda t, x, a: ["topo", "show", _fifo(t)],
    "algorithms show --ranks 100000": lambda t, x, a: ["algorithms", "show", "ring_allgather", "--ranks", "100000"],
    "topo draw fully_connected:2000": lambda t, x, a: ["topo", "draw", "fully_connected:2000", "-o",
                                                       str(t / "x.png")],
    "alpha_us NaN": lambda t, x, a: ["topo", "show", _link(t, alpha_us=float("nan"))],
    "beta_us_per_mb negative": lambda t, x, a: ["topo", "show", _link(t, beta_us_per_mb=-1.0)],
    "num_ranks 4.5": lambda t, x, a: ["topo", "show", _topology(t, num_ranks=4.5)],
    "src 0.5": lambda t, x, a: ["topo", "show", _link(t, src=0.5)],
    "num_ranks \"4\"": lambda t, x, a: ["topo", "show", _topology(t, num_ranks="4")],
    "inplace \"no\"": lambda t, x, a: ["run", str(x), "--collective", _collective(t, inplace="no")],
    "misspelt key": lambda t, x, a: ["topo", "show", _topology(t, swiches=[])],
    "format collsynth.algorithm/2": lambda t, x, a: ["lower", _edit_algorithm(t, a, None, "collsynth.algorithm/2")],
    "sim nchunksperloop 10^9": lambda t, x, a: ["sim", _xml(t, x, 'nchunksperloop="8"', 'nchunksperloop="1000000000"'),
                                                "-t", "ring:4"],
    "sim nchunksperloop mismatch": lambda t, x, a: ["sim", _xml(t, x, 'nchunksperloop="8"', 'nchunksperloop="16"'),
                                                    "-t", "ring:4"],
    "sim send/receive mismatch": lambda t, x, a: ["sim", _xml(t, x, 'type="s" ', 'type="cpy" '), "-t", "ring:4"],
    "export chakra nchunksperloop mismatch": lambda t, x, a: [
        "export", "chakra", _xml(t, x, 'nchunksperloop="8"', 'nchunksperloop="16"'), "-o", str(t / "et")],
    "lower --size 3": lambda t, x, a: ["lower", str(a), "--xml", str(t / "o.xml"), "--size", "3"],
    "catalog protocols = []": lambda t, x, a: ["catalog", "build", _write(t, "p.toml", PLAN + "[compile]\n"
                                                                         "protocols = []\n"),
                                               "--dry-run", "--db", str(t / "c.sqlite")],
    "regress --baseline typo.json": lambda t, x, a: ["regress", "--quick", "--baseline", str(t / "typo.json")],
    "sketch chunkup 10^6": lambda t, x, a: ["synth", "milp", str(TACCL / "topo" / "topo-ndv2-1MB.json"),
                                            "allgather", "--sketch", _sketch(t, 10**6)],
    "sketch non-UTF-8": lambda t, x, a: ["synth", "milp", str(TACCL / "topo" / "topo-ndv2-1MB.json"), "allgather",
                                         "--sketch", _write(t, "s.json", b"\xff")],
}


def _edit_algorithm(tmp: Path, source: Path, send: list | None, fmt: str | None = None) -> str:
    doc = json.loads(source.read_text())
    if send is not None:
        doc["steps"][0]["sends"][0] = send
    if fmt is not None:
        doc["format"] = fmt
    return _write(tmp, "algo.json", json.dumps(doc))


@pytest.fixture(scope="module")
def algorithm_file(tmp_path_factory, cli_runner_module):
    path = tmp_path_factory.mktemp("algo") / "ring_ag.json"
    result = cli_runner_module.invoke(main, ["synth", "instance", "ring:4", "allgather", "-c", "1", "-s", "3", "-o",
                                             str(path)])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module")
def cli_runner_module():
    from click.testing import CliRunner

    return CliRunner()


@pytest.mark.parametrize("name", sorted(CASES))
def test_issue_example_is_one_line_exit_2(name, tmp_path, cli_runner, ring_allgather_xml, algorithm_file):
    if "sketch" in name and TACCL is None:
        pytest.skip("shared/examples missing")
    args = CASES[name](tmp_path, ring_allgather_xml, algorithm_file)
    result = cli_runner.invoke(main, args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (name, result.exit_code, result.output, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), (name, result.stderr)


@pytest.mark.parametrize("target", ["/dev/null", "fifo", "link-to-null"])
def test_writers_never_replace_special_files(target, tmp_path, cli_runner):
    path = {"/dev/null": Path("/dev/null"), "fifo": tmp_path / "fifo", "link-to-null": tmp_path / "link"}[target]
    if target == "fifo":
        os.mkfifo(path)
    if target == "link-to-null":
        path.symlink_to("/dev/null")
    before = os.lstat(path).st_mode
    result = cli_runner.invoke(main, ["algorithms", "show", "ring_allgather", "--ranks", "4", "-o", str(path)])
    assert result.exit_code == 2 and "not a regular file" in result.stderr
    assert os.lstat(path).st_mode == before and not stat.S_ISREG(os.stat(path).st_mode)
