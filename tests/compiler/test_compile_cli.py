"""`collsynth compile PROGRAM.py [args] -o out.xml`, and bad DSL programs: one line, exit 2, the DSL line."""

import textwrap
from pathlib import Path

import pytest

from collsynth.cli import main
from collsynth.emit.msccl_xml import read_xml

PROGRAMS = Path(__file__).parents[1] / "language" / "programs"

HEADER = """\
from collsynth.language import *
from collsynth.language.collectives import AllGather, AllReduce
from collsynth.topologies import *
"""


def write(tmp_path: Path, body: str, name: str = "prog.py") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def line_of(path: Path, marker: str) -> int:
    (number,) = [k for k, text in enumerate(path.read_text().splitlines(), 1) if marker in text]
    return number


def test_compile_mscclang_program_with_its_arguments(cli_runner, tmp_path):
    out = tmp_path / "ring.xml"
    result = cli_runner.invoke(main, ["compile", str(PROGRAMS / "allreduce_ring.py"), "4", "2", "1", "--protocol",
                                      "LL", "-o", str(out)])
    assert result.exit_code == 0, result.output
    ir = read_xml(out)
    assert (ir.name, ir.proto, ir.ngpus, ir.nchannels, ir.collective) == ("ring_allreduce_2ch", "LL", 4, 2, "allreduce")
    assert "compiled 'ring_allreduce_2ch'" in result.stderr and str(out) in result.stderr


def test_compile_prints_xml_without_output_file(cli_runner):
    result = cli_runner.invoke(main, ["compile", str(PROGRAMS / "alltoall_two_step.py"), "2", "2"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<algo name=\"alltoall_two_step\"")
    assert read_xml(result.stdout).ngpus == 4


def test_compile_native_program_and_pick_by_name(cli_runner, tmp_path):
    path = write(tmp_path, """\
        from collsynth.collectives import make_collective
        def build(name, n):
            b = ProgramBuilder(name, ring(n), make_collective("allgather", n))
            for r in range(n):
                c = b.chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
                for hop in range(1, n):
                    c = c.copy((r + hop) % n, Buffer.output, r)
            return b.build()
        build("small", 3)
        build("large", 5)
        """)
    result = cli_runner.invoke(main, ["compile", str(path), "--name", "small", "--show-ir"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("algo 'small' coll=allgather") and "ngpus=3" in result.stdout
    result = cli_runner.invoke(main, ["compile", str(path), "--show-ir"])
    assert result.exit_code == 0 and "ngpus=5" in result.stdout
    assert "built 2 programs (small, large); writing the last one" in result.stderr


def expect_one_line_error(result, text: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ") and text in lines[0], lines[0]


@pytest.mark.parametrize("body, marker, message", [
    ("""\
        with MSCCLProgram("stale", fully_connected(3), AllGather(3, 1, False), 1):
            c = chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
            chunk(2, Buffer.input, 0).copy(1, Buffer.output, 0)
            c.copy(2, Buffer.output, 0)  # HERE
        """, "# HERE", "stale reference: rank 1 output[0] was overwritten at line"),
    ("""\
        with MSCCLProgram("unwritten", fully_connected(3), AllGather(3, 1, False), 1):
            chunk(1, Buffer.output, 2).copy(0, Buffer.output, 2)  # HERE
        """, "# HERE", "AttributeError: 'NoneType' object has no attribute 'copy' (chunk() returns None for a "
              "slot nobody wrote yet"),
    ("""\
        with MSCCLProgram("nolink", line(3), AllGather(3, 1, False), 1):
            chunk(0, Buffer.input, 0).copy(2, Buffer.output, 0)  # HERE
        """, "# HERE", "no link from rank 0 to rank 2 in topology line:3"),
    ("""\
        with MSCCLProgram("limit", fully_connected(2), AllGather(2, 80, False), 1):
            chunk(0, Buffer.input, 0, 80).copy(1, Buffer.output, 0)  # HERE
            XML()
        """, "# HERE", "a step moves 80 chunks; MSCCL moves at most 71 per step"),
    ("""\
        with MSCCLProgram("bug", fully_connected(2), AllGather(2, 1, False), 1):
            x = 1 / 0  # HERE
        """, "# HERE", "ZeroDivisionError: division by zero"),
])
def test_bad_programs_fail_with_one_line_naming_the_dsl_line(cli_runner, tmp_path, body, marker, message):
    path = write(tmp_path, body)
    result = cli_runner.invoke(main, ["compile", str(path), "-o", str(tmp_path / "out.xml")])
    expect_one_line_error(result, f"prog.py:{line_of(path, marker)}: ")
    assert message in result.stderr
    assert not (tmp_path / "out.xml").exists()


def test_a_file_that_builds_nothing_is_refused(cli_runner, tmp_path):
    path = write(tmp_path, "x = 1\n")
    result = cli_runner.invoke(main, ["compile", str(path), "-o", str(tmp_path / "out.xml")])
    expect_one_line_error(result, "prog.py built no program")


def test_missing_file_and_program_exit(cli_runner, tmp_path):
    expect_one_line_error(cli_runner.invoke(main, ["compile", str(tmp_path / "nope.py")]), "no such file")
    path = write(tmp_path, "import sys\nsys.exit(3)\n")
    expect_one_line_error(cli_runner.invoke(main, ["compile", str(path)]), "prog.py exited with status 3")


def test_a_wrong_program_is_not_written(cli_runner, tmp_path):
    path = write(tmp_path, """\
        with MSCCLProgram("half", fully_connected(2), AllGather(2, 1, False), 1):
            chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
        """)
    out = tmp_path / "out.xml"
    result = cli_runner.invoke(main, ["compile", str(path), "-o", str(out)])
    assert result.exit_code == 1
    assert "FAIL" in result.stderr and "nothing written" in result.stderr
    assert not out.exists()
    assert cli_runner.invoke(main, ["compile", str(path), "-o", str(out), "--no-verify"]).exit_code == 0
    assert out.exists()


def test_custom_collective_from_xml_is_verified_with_its_recorded_collective(cli_runner, tmp_path):
    path = write(tmp_path, """\
        from collsynth.collectives import alltonext
        with MSCCLProgram("a2n", line(4), alltonext(4), 2):
            for r in range(3):
                chunk(r, Buffer.input, 0).copy(r + 1, Buffer.output, 0)
            XML()
        """)
    refused = cli_runner.invoke(main, ["compile", str(path), "-o", str(tmp_path / "a2n.xml")])
    assert refused.exit_code == 2 and "cannot load a user-defined collective" in refused.output
    assert not (tmp_path / "a2n.xml").exists()
    result = cli_runner.invoke(main, ["compile", str(path), "-o", str(tmp_path / "a2n.xml"), "--target",
                                      "msccl-legacy"])
    assert result.exit_code == 0, result.output
    ir = read_xml(tmp_path / "a2n.xml")
    assert (ir.collective, ir.nchannels, ir.nchunksperloop) == ("custom", 2, 2)
