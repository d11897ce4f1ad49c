"""nccl-tests conventions (size/count columns, busbw factors), the table, JSON, and the `sim` CLI."""

from __future__ import annotations

import json

import pytest
from sim_irs import chain_broadcast_ir, ring_allreduce_ir

from collsynth.cli import main
from collsynth.emit.msccl_xml import write_xml
from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.sim import busbw_factor, dtype_info, nccl_size, simulate, size_sweep
from collsynth.sim.plot import plot_busbw
from collsynth.topologies import line, ring

MiB = 1 << 20


@pytest.mark.parametrize("coll, factor", [
    ("allreduce", 2 * 7 / 8), ("allgather", 7 / 8), ("reduce_scatter", 7 / 8), ("reducescatter", 7 / 8),
    ("alltoall", 7 / 8), ("broadcast", 1.0), ("reduce", 1.0), ("custom", 1.0),
])
def test_busbw_factors(coll: str, factor: float) -> None:
    assert busbw_factor(coll, 8) == pytest.approx(factor)


def test_nccl_size_and_count_columns() -> None:
    # AllReduce: every element; count = elements
    assert nccl_size("allreduce", 8, MiB, 4) == (MiB, MiB // 4)
    # AllGather: count is the per-rank count (aligned to 4 elements), size the whole output
    ag = nccl_size("allgather", 8, MiB, 4)
    assert ag.count == MiB // 4 // 8 and ag.size_bytes == MiB
    ag_odd = nccl_size("allgather", 3, 1000, 4)  # 250 elements -> 83 per rank -> 80 aligned
    assert ag_odd.count == 80 and ag_odd.size_bytes == 80 * 3 * 4
    rs = nccl_size("reducescatter", 3, 1000, 4)
    assert rs.count == 80 and rs.size_bytes == 960
    # AllToAll: per-peer count rounded down to 16 bytes
    a2a = nccl_size("alltoall", 3, 1000, 4)  # 250 // 3 = 83 -> 80 (multiple of 4 floats)
    assert a2a.count == 80 and a2a.size_bytes == 960
    assert nccl_size("broadcast", 8, 1001, 2) == (1000, 500)


def test_dtype_names_follow_nccl_tests() -> None:
    assert dtype_info("float32") == ("float", 4)
    assert dtype_info("half") == ("half", 2)
    assert dtype_info("BF16") == ("bfloat16", 2)
    assert dtype_info("double") == ("double", 8)


def test_size_sweep_doubles_like_nccl_tests() -> None:
    assert size_sweep(1024, 8192) == [1024, 2048, 4096, 8192]
    assert size_sweep(1024, 5000) == [1024, 2048, 4096]
    assert size_sweep(1, 64, 4) == [1, 4, 16, 64]


def test_rows_algbw_busbw_and_count_columns() -> None:
    result = simulate(ring_allreduce_ir(4), ring(4), [MiB], dtype="half")
    row = result.rows[0]
    assert (row.size_bytes, row.count, row.type) == (MiB, MiB // 2, "half")
    assert row.algbw_GBps == pytest.approx(MiB / 1e9 / (row.time_us * 1e-6))
    assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 1.5)
    size, count, type_, time_us, algbw, busbw = row  # rows unpack like the nccl-tests columns
    assert (size, count, type_) == (MiB, MiB // 2, "half")


def test_table_layout() -> None:
    result = simulate(ring_allreduce_ir(4), ring(4), size_sweep(1024, 4096))
    lines = result.table().splitlines()
    assert lines[0].startswith("# collsynth sim: ring_allreduce_4 (AllReduce, 4 ranks) on ring:4")
    assert lines[1].split()[1:] == ["size", "count", "type", "time", "algbw", "busbw"]
    assert lines[2].split()[1:] == ["(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)"]
    body = [line.split() for line in lines[3:6]]
    assert [int(cols[0]) for cols in body] == [1024, 2048, 4096]
    assert [int(cols[1]) for cols in body] == [256, 512, 1024]
    assert all(cols[2] == "float" for cols in body)
    assert [float(cols[3]) for cols in body] == [pytest.approx(r.time_us, abs=0.01) for r in result.rows]
    assert lines[6].startswith("# Avg bus bandwidth")
    assert str(result) == result.table()


def test_to_dict_is_json() -> None:
    result = simulate(ring_allreduce_ir(4), ring(4), [MiB, 64 * MiB])
    data = json.loads(json.dumps(result.to_dict()))
    assert data["collective"] == "allreduce" and data["ngpus"] == 4 and data["topology"] == "ring:4"
    assert [row["size_bytes"] for row in data["rows"]] == [MiB, 64 * MiB]
    assert data["rows"][1]["tiles"] == 8 and data["rows"][1]["extrapolated"] is False
    assert data["model"]["max_exact_tiles"] == 16 and data["model"]["tile_bytes"] is None


def test_plot_writes_a_png(tmp_path) -> None:
    sizes = size_sweep(1024, 64 * MiB)
    results = [simulate(ring_allreduce_ir(4), ring(4), sizes),
               simulate(ring_allreduce_ir(4, name="ring_again"), ring(4), sizes)]
    path = plot_busbw(results, tmp_path / "busbw.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["busbw.png"]  # no temporary file left behind


def _write(ir: Algo, tmp_path, name: str):
    path = tmp_path / f"{name}.xml"
    write_xml(ir, path)
    return path


def test_cli_prints_one_table_per_file(cli_runner, tmp_path) -> None:
    first = _write(ring_allreduce_ir(4), tmp_path, "ring")
    second = _write(ring_allreduce_ir(4, proto="LL", name="ring_ll"), tmp_path, "ring_ll")
    plot = tmp_path / "out.png"
    result = cli_runner.invoke(main, ["sim", str(first), str(second), "--topology", "ring:4",
                                      "--sizes", "1KB:1MB", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert result.output.count("# collsynth sim:") == 2
    assert "ring_ll" in result.output
    rows = [line for line in result.output.splitlines() if line and not line.startswith(("#", "plot"))]
    assert len(rows) == 2 * 11
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_cli_json(cli_runner, tmp_path) -> None:
    path = _write(chain_broadcast_ir(3), tmp_path, "chain")
    result = cli_runner.invoke(main, ["sim", str(path), "-t", "line:3", "-s", "1MB,4MB", "--json", "-d", "half"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [row["size_bytes"] for row in data[0]["rows"]] == [MiB, 4 * MiB]
    assert data[0]["dtype"] == "half" and data[0]["rows"][0]["count"] == MiB // 2


@pytest.mark.parametrize("args, message", [
    (["--topology", "line:4"], "no link"),
    (["--topology", "nosuchtopo"], "unknown topology"),
    (["--topology", "ring:4", "--sizes", "4KB:1KB"], "empty"),
    (["--topology", "ring:4", "--sizes", "lots"], "cannot read size"),
    (["--topology", "ring:4", "--plot", "out.gif"], ".png"),
    (["--topology", "ring:4", "--dtype", "float7"], "unknown data type"),
])
def test_cli_errors_are_one_line(cli_runner, tmp_path, args, message) -> None:
    path = _write(ring_allreduce_ir(4), tmp_path, "ring")
    result = cli_runner.invoke(main, ["sim", str(path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_cli_rejects_unreadable_xml(cli_runner, tmp_path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text("<algo")
    result = cli_runner.invoke(main, ["sim", str(bad), "--topology", "ring:4"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_cli_all_step_types_simulate(cli_runner, tmp_path) -> None:
    ir = Algo("two", "custom", "Simple", 1, 1, 2, False, (
        Gpu(0, 1, 1, 0, (Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "o", 0, 1),)),)),
        Gpu(1, 1, 1, 0, (Threadblock(0, -1, 0, 0, (Step(0, "r", "i", 0, "o", 0, 1),)),)),
    ))
    path = _write(ir, tmp_path, "two")
    result = cli_runner.invoke(main, ["sim", str(path), "--topology", line(2).name, "--sizes", "1MB"])
    assert result.exit_code == 0, result.output
    assert "1048576" in result.output
