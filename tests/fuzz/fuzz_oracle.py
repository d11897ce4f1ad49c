"""The fuzz suite's oracle: run one CLI command in-process on a mutated file and judge the outcome."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from collsynth.catalog import expand_plan, load_plan
from collsynth.cli import main
from collsynth.core.errors import CollsynthError
from collsynth.core.files import parse_json
from collsynth.encodings.sketch import load_sketch
from collsynth.runtime.cpu import execute_cpu
from collsynth.schedule import Algorithm, verify
from collsynth.topologies import Topology


def assert_one_line_refusal(result, what: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: stderr {result.stderr!r}"


def judge(kind: str, path: Path, workdir: Path, xml_seed: Path) -> str:
    """Run the command that reads `kind` on `path`; assert exit 2 with one line, or a verified success.
    Returns 'refused' or 'accepted'."""
    runner = CliRunner()
    if kind in ("topology", "taccl_profile"):
        args = ["topo", "show", str(path), "--json"]
    elif kind in ("collective", "custom_collective"):
        args = ["run", str(xml_seed), "--collective", str(path), "--size", "4KB"]
    elif kind == "algorithm":
        args = ["lower", str(path)]
    elif kind == "plan":
        args = ["catalog", "build", str(path), "--dry-run", "--db", str(workdir / "c.sqlite")]
    elif kind in ("xml_run", "xml_sim"):
        args = (["run", str(path), "--size", "4KB"] if kind == "xml_run"
                else ["sim", str(path), "-t", "ring:4", "-s", "1MB"])
    else:
        raise AssertionError(kind)
    result = runner.invoke(main, args)
    what = f"{kind} {args}"
    if result.exit_code == 2:
        assert_one_line_refusal(result, what)
        return "refused"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{what}: crashed with {result.exception!r}") from result.exception
    if kind == "xml_run" or (kind.endswith("collective") and result.exit_code == 1):
        # the interpreter's verdict is the output: PASS (0) or FAIL (1), never a crash
        assert result.exit_code in (0, 1), (what, result.output)
        assert result.stdout.startswith("PASS" if result.exit_code == 0 else "FAIL"), (what, result.stdout)
        return "accepted"
    assert result.exit_code == 0, (what, result.exit_code, result.output)
    _verify_success(kind, path, result.stdout)
    return "accepted"


def _verify_success(kind: str, path: Path, stdout: str) -> None:
    """Check an accepted input independently of the command that accepted it."""
    if kind in ("topology", "taccl_profile"):
        doc = parse_json(stdout, "stdout")  # strict: a NaN written back would fail here
        assert Topology.from_dict(doc).to_dict() == doc
        for link in doc["links"]:
            assert link["alpha_us"] >= 0 and link["beta_us_per_mb"] >= 0
    elif kind.endswith("collective"):
        assert stdout.startswith("PASS")
    elif kind == "algorithm":
        verify(Algorithm.load(path))
    elif kind == "plan":
        items = expand_plan(load_plan(path))
        assert items and all(item.variants and item.sizes for item in items)
    elif kind == "xml_sim":
        from collsynth.emit.msccl_xml import read_xml

        assert execute_cpu(read_xml(path), nbytes=None, postcondition=False).passed
        assert "busbw" in stdout


def judge_sketch(path: Path) -> str:
    """Sketches are read by `synth milp` before a solver runs; the reader itself is fuzzed (a solve per case
    would be too slow): a one-line CollsynthError, or a sketch."""
    try:
        sketch = load_sketch(path)
    except CollsynthError as exc:
        assert "\n" not in str(exc), str(exc)
        return "refused"
    assert sketch is not None
    return "accepted"
