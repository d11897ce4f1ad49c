"""`collsynth synth greedy|auto|trees`: bad options, huge sizes and outputs that cannot be written are each one
`error:` line, exit 2, with nothing written (before these options were checked: `--link-gbps inf` and `--seed -1`
were tracebacks, `-c 1000000000` and `--link-gbps nan` hung, `--time-limit nan` ran)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from collsynth.cli import main

BAD = [
    ("greedy", ["--link-gbps", "nan"], "'nan' is not a finite number > 0"),
    ("greedy", ["--link-gbps", "inf"], "'inf' is not a finite number > 0"),
    ("trees", ["--link-gbps", "0"], "'0' is not a finite number > 0"),
    ("auto", ["--link-gbps", "50", "--link-alpha-us", "nan"], "'nan' is not a finite number >= 0"),
    ("greedy", ["--link-gbps", "50", "--link-alpha-us", "-1"], "'-1' is not a finite number >= 0"),
    ("greedy", ["--seed", "-1"], "-1 is below 0"),
    ("auto", ["--seed", "99999999999999999999"], "is not a whole number"),
    ("greedy", ["-c", "1000000000"], "above the cap of 256; raise it with COLLSYNTH_MAX_CHUNKS_PER_RANK=N"),
    ("trees", ["--chunks-per-tree", "100000000"], "above the cap of 256"),
    ("auto", ["--time-limit", "nan"], "not a positive finite time limit"),
    ("greedy", ["--root", "99999999999999999999"], "is not a whole number"),
    ("greedy", ["--size", "99999999999999999999G"], "above the cap of 1125899906842624 bytes"),
    ("trees", ["--size", "9" * 400], "above the cap"),
]


@pytest.mark.parametrize(("command", "args", "message"), BAD, ids=[f"{c}{' '.join(a)[:30]}" for c, a, _ in BAD])
def test_bad_options_are_one_line(tmp_path: Path, cli_runner, command: str, args: list[str], message: str) -> None:
    out = tmp_path / "algo.json"
    result = cli_runner.invoke(main, ["synth", command, "ring:4", "allgather", *args, "-o", str(out)])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (result.output,
                                                                                         result.exception)
    assert message in lines[0]
    assert not out.exists()


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and Python's ignored SIGXFSZ")
@pytest.mark.parametrize("command", ["greedy", "auto", "trees"])
def test_a_full_disk_while_the_json_streams_is_one_line_and_leaves_nothing(tmp_path: Path, command: str) -> None:
    """A file-size limit below the algorithm's JSON makes the streamed write fail part-way (EFBIG, as ENOSPC on a
    full disk): one line, exit 2, no output and no temporary file; an older output stays as it was."""
    out = tmp_path / "algo.json"
    out.write_text("old")

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    command_line = [sys.executable, "-c", "from collsynth.cli import main; main()", "synth", command, "ring:8",
                    "allgather", "-o", str(out)]
    done = subprocess.run(command_line, capture_output=True, text=True, timeout=300, preexec_fn=limit_file_size)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"error: {out}: cannot write there (File too large); choose a writable place"]
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["algo.json"]
