from dataclasses import replace

from collsynth.cli import main
from collsynth.emit.msccl_xml import write_xml
from collsynth.ir import Gpu, Step, Threadblock
from collsynth.runtime import samples


def test_run_passes_a_correct_program(cli_runner, tmp_path):
    path = write_xml(samples.ring_allreduce(8), tmp_path / "ring.xml")
    result = cli_runner.invoke(main, ["run", str(path), "--size", "64KB"])
    assert result.exit_code == 0, result.output
    line = result.output.splitlines()[0]
    assert line.startswith("PASS  AllReduce  ngpus=8  size=64KB  dtype=float32  time=")
    assert line.endswith("backend=cpu")


def test_run_options(cli_runner, tmp_path):
    path = write_xml(samples.ring_allgather(4), tmp_path / "ag.xml")
    result = cli_runner.invoke(main, ["run", str(path), "--size", "4096", "--dtype", "float16", "--seed", "5"])
    assert result.exit_code == 0, result.output
    assert "size=4KB  dtype=float16" in result.output
    result = cli_runner.invoke(main, ["run", str(path), "--collective", "allgather"])
    assert result.exit_code == 0, result.output


def test_run_fails_with_exit_1_and_names_the_stuck_threadblocks(cli_runner, tmp_path):
    ir = samples.ring_allgather(2)
    receive_only = [(Step(0, "r", "i", 0, "o", 1 - r, 1),) for r in range(2)]  # both wait, nobody sends
    stuck = tuple(Gpu(r, 1, 2, 0, (Threadblock(0, 1 - r, 1 - r, 0, receive_only[r]),)) for r in range(2))
    path = write_xml(replace(ir, gpus=stuck), tmp_path / "stuck.xml")
    result = cli_runner.invoke(main, ["run", str(path), "--size", "1KB"])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("FAIL  AllGather  ngpus=2") and "deadlock" in lines[0]
    assert lines[1].strip().startswith("gpu 0 tb 0 step 0 (r) waits for a message from rank 1")


def test_bad_input_is_one_line_and_exit_2(cli_runner, tmp_path):
    path = write_xml(samples.ring_allreduce(3), tmp_path / "ring.xml")
    result = cli_runner.invoke(main, ["run", str(path), "--size", "1000"])
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: size 1000 bytes does not split into 3 input chunks")
    assert len(result.output.strip().splitlines()) == 1
    bad = tmp_path / "bad.xml"
    bad.write_text('<algo name="x">\n  <gpu id="0"/>\n</algo>\n')
    result = cli_runner.invoke(main, ["run", str(bad)])
    assert result.exit_code == 2 and "bad.xml:1: <algo> attribute 'coll' is missing" in result.output
    result = cli_runner.invoke(main, ["run", str(path), "--size", "1 PB"])
    assert result.exit_code == 2 and "cannot read size" in result.output
