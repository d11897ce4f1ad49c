"""`collsynth doctor`: replays each target's loader and selection rule on XML files; every XML that compile and
lower write for a target passes it, and what a runtime would refuse or never select is reported (exit 1)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from collsynth.algorithms import LIBRARY
from collsynth.cli import main
from collsynth.compiler import compile_program
from collsynth.emit.msccl_xml import ir_to_xml, write_xml
from collsynth.topologies.library import fully_connected

DATA = Path(__file__).parents[1] / "language" / "data" / "dgx1-allreduce-c1s2r8.json"


def doctor(cli_runner, *args: str):
    return cli_runner.invoke(main, ["doctor", *map(str, args)])


@pytest.mark.parametrize("target", ["msccl-executor", "rccl", "msccl-legacy"])
@pytest.mark.parametrize("name", ["ring_reducescatter", "ring_allreduce"])
def test_compiled_xml_passes_doctor(cli_runner, tmp_path: Path, target: str, name: str) -> None:
    program = LIBRARY[name].builder(fully_connected(64) if name == "ring_allreduce" else fully_connected(8))
    path = write_xml(compile_program(program, target=target), tmp_path / f"{name}.xml", target)
    result = doctor(cli_runner, path, "--target", target)
    assert result.exit_code == 0, result.output
    assert f"ok: every file loads and is selected by {target}" in result.output


@pytest.mark.parametrize("target", ["msccl-executor", "rccl", "msccl-legacy"])
def test_cli_compile_and_lower_pass_doctor(cli_runner, tmp_path: Path, target: str) -> None:
    (tmp_path / "out").mkdir()
    xml = tmp_path / "out" / "lowered.xml"
    lowered = cli_runner.invoke(main, ["lower", str(DATA), "--xml", str(xml), "--target", target])
    assert lowered.exit_code == 0, lowered.output
    program = tmp_path / "prog.py"
    program.write_text("from collsynth.language import *\nfrom collsynth.language.collectives import AllGather\n"
                       "from collsynth.topologies.library import fully_connected\n"
                       "with MSCCLProgram('ag', fully_connected(4), AllGather(4, 1, False), 1):\n"
                       "    for r in range(4):\n"
                       "        for p in range(4):\n"
                       "            chunk(r, Buffer.input, 0).copy(p, Buffer.output, r)\n")
    compiled = cli_runner.invoke(main, ["compile", str(program), "-o", str(tmp_path / "out" / "ag.xml"),
                                        "--target", target])
    assert compiled.exit_code == 0, compiled.output
    result = doctor(cli_runner, tmp_path / "out", "--target", target)
    assert result.exit_code == 0, result.output
    source = doctor(cli_runner, tmp_path, "--target", target)  # the loader parses every file: prog.py too
    assert source.exit_code == 1 and "REFUSED prog.py: XML Parse error" in source.output


def test_unsplit_ring_is_refused_with_the_runtime_line(cli_runner, tmp_path: Path) -> None:
    ir = compile_program(LIBRARY["ring_allreduce"].builder(fully_connected(64)))
    (tmp_path / "ring.xml").write_text(ir_to_xml(ir))
    result = doctor(cli_runner, tmp_path / "ring.xml", "--target", "rccl")
    assert result.exit_code == 1
    assert "REFUSED ring.xml: RCCL (ROCm/rccl) runs at most 64 steps per thread block" in result.output
    # 256 steps load in microsoft/msccl, but maxBytes="0" there means an empty range: loaded, never selected
    legacy = doctor(cli_runner, tmp_path / "ring.xml", "--target", "msccl-legacy")
    assert legacy.exit_code == 1 and "NEVER   ring.xml: loaded but never selected" in legacy.output
    (tmp_path / "ring.xml").write_text(ir_to_xml(ir, "msccl-legacy"))
    assert doctor(cli_runner, tmp_path / "ring.xml", "--target", "msccl-legacy").exit_code == 0


def test_spellings_and_legacy_rules(cli_runner, tmp_path: Path) -> None:
    ir = compile_program(LIBRARY["ring_reducescatter"].builder(fully_connected(8)))
    (tmp_path / "rs.xml").write_text(ir_to_xml(ir))  # current spelling `reducescatter`, maxBytes 0
    legacy = doctor(cli_runner, tmp_path / "rs.xml", "--target", "msccl-legacy")
    assert legacy.exit_code == 1 and "unsupported collective: reducescatter" in legacy.output
    (tmp_path / "rs.xml").write_text(ir_to_xml(ir, "msccl-legacy"))
    assert doctor(cli_runner, tmp_path / "rs.xml", "--target", "msccl-executor").exit_code == 1
    assert doctor(cli_runner, tmp_path / "rs.xml", "--target", "msccl-legacy").exit_code == 0
    text = ir_to_xml(ir, "msccl-legacy").replace('minBytes="0"', 'minBytes="4096"')
    text = text.replace('maxBytes="9223372036854775807"', 'maxBytes="0"')
    (tmp_path / "rs.xml").write_text(text)
    empty = doctor(cli_runner, tmp_path / "rs.xml", "--target", "msccl-legacy")
    # microsoft/msccl topo.cc: minBytes > maxBytes is refused, so maxBytes="0" with minBytes > 0 is
    assert empty.exit_code == 1 and "MSCCL: minBytes cannot be greater than maxBytes." in empty.output


def test_absent_size_attributes(cli_runner, tmp_path: Path) -> None:
    """Legacy defaults an absent maxBytes to 128 MB (topo.cc); the executor and RCCL read it without a default."""
    ir = compile_program(LIBRARY["ring_allreduce"].builder(fully_connected(8)))
    text = ir_to_xml(ir, "msccl-legacy").replace(' maxBytes="9223372036854775807"', "")
    (tmp_path / "ar.xml").write_text(text)
    legacy = doctor(cli_runner, tmp_path / "ar.xml", "--target", "msccl-legacy")
    assert legacy.exit_code == 0 and "bytes=[0, 134217728]" in legacy.output
    assert "from      128MB: none" in legacy.output  # size < maxBytes: 128 MB itself falls back
    (tmp_path / "ar.xml").write_text(ir_to_xml(ir, "rccl").replace(' maxBytes="0"', ""))
    rccl = doctor(cli_runner, tmp_path / "ar.xml", "--target", "rccl")
    assert rccl.exit_code == 1 and "lacks the required attribute maxBytes" in rccl.output


def test_legacy_refuses_chunks_inconsistent_with_nchunksperloop(cli_runner, tmp_path: Path) -> None:
    ir = compile_program(LIBRARY["ring_allgather"].builder(fully_connected(8)))
    (tmp_path / "ag.xml").write_text(ir_to_xml(ir, "msccl-legacy"))
    assert doctor(cli_runner, tmp_path / "ag.xml", "--target", "msccl-legacy").exit_code == 0
    (tmp_path / "ag.xml").write_text(ir_to_xml(replace(ir, nchunksperloop=ir.nchunksperloop * 2), "msccl-legacy"))
    bad = doctor(cli_runner, tmp_path / "ag.xml", "--target", "msccl-legacy")
    assert bad.exit_code == 1 and "Inconsistency between i_chunks/o_chunks (1/8) and nchunksperloop (16)" in bad.output


def test_shadowed_file_is_never_selected_and_sizes_are_explained(cli_runner, tmp_path: Path) -> None:
    ir = compile_program(LIBRARY["ring_allreduce"].builder(fully_connected(8)))
    write_xml(replace(ir, max_bytes=1 << 20), tmp_path / "a.xml", "rccl")
    write_xml(replace(ir, name="b", min_bytes=1 << 10, max_bytes=1 << 19), tmp_path / "b.xml", "rccl")
    result = doctor(cli_runner, tmp_path, "--target", "rccl")
    assert result.exit_code == 1
    assert "NEVER   b.xml: loaded but never selected" in result.output
    big = doctor(cli_runner, tmp_path, "--target", "rccl", "--size", "4MB")
    assert "none: no file's range holds 4194304 bytes" in big.output
    small = doctor(cli_runner, tmp_path, "--target", "rccl", "--size", "64KB", "--nranks", "8")
    assert "a.xml" in small.output.splitlines()[-2] and small.exit_code == 0


def test_bad_input_is_one_line(cli_runner, tmp_path: Path) -> None:
    result = doctor(cli_runner, tmp_path / "missing")
    assert result.exit_code == 2 and "no such file or directory" in result.output
    bad = cli_runner.invoke(main, ["doctor", str(tmp_path), "--target", "nccl"])
    assert bad.exit_code == 2




def test_xml_call_is_recompiled_for_the_target(cli_runner, tmp_path: Path) -> None:
    program = tmp_path / "ring64.py"
    program.write_text("from collsynth.language import *\nfrom collsynth.language.collectives import AllReduce\n"
                       "from collsynth.language.routines import allreduce_ring_inplace\n"
                       "from collsynth.topologies import fully_connected\n"
                       "with MSCCLProgram('ring64', fully_connected(64), AllReduce(64, 64, True), 1):\n"
                       "    allreduce_ring_inplace(64)\n"
                       "    XML()\n")
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "ring64.xml"
    compiled = cli_runner.invoke(main, ["compile", str(program), "-o", str(out), "--target", "rccl"])
    assert compiled.exit_code == 0, compiled.output
    assert doctor(cli_runner, out, "--target", "rccl").exit_code == 0
