"""`collsynth catalog ...` end to end, and its one-line errors (exit 2) for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalog_helpers import LIBRARY_PLAN

from collsynth.cli import main


@pytest.fixture
def built(tmp_path: Path, cli_runner) -> tuple[Path, Path]:
    plan = tmp_path / "plan.toml"
    plan.write_text(LIBRARY_PLAN)
    db = tmp_path / "c.sqlite"
    result = cli_runner.invoke(main, ["catalog", "build", str(plan), "--db", str(db), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "entries verified" in result.output
    return plan, db


def test_build_list_show_best_export(built: tuple[Path, Path], cli_runner, tmp_path: Path) -> None:
    plan, db = built
    listed = cli_runner.invoke(main, ["catalog", "list", "--db", str(db), "--json"])
    entries = json.loads(listed.output)
    assert {e["name"] for e in entries} >= {"ring_allgather", "ring_allreduce"}
    assert all(e["status"] == "ok" and e["xml_sha256"] for e in entries)
    table = cli_runner.invoke(main, ["catalog", "list", "--db", str(db), "-c", "AllReduce"])
    assert "ring_allreduce" in table.output and "ring_allgather" not in table.output

    ring = next(e for e in entries if e["name"] == "ring_allgather")
    shown = cli_runner.invoke(main, ["catalog", "show", ring["id"][:6], "--db", str(db)])
    assert shown.exit_code == 0 and "busbw" in shown.output and ring["id"] in shown.output
    xml = cli_runner.invoke(main, ["catalog", "show", ring["id"][:6], "--db", str(db), "--xml"])
    assert xml.output.startswith("<algo ")

    best = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allreduce", "1MB", "--db", str(db),
                                    "--json"])
    ranked = json.loads(best.output)
    assert ranked == sorted(ranked, key=lambda r: r["time_us"]) and len(ranked) == 5
    off_grid = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allreduce", "3MB", "--db", str(db)])
    assert off_grid.exit_code == 0 and off_grid.output.startswith("best: ")

    dry = cli_runner.invoke(main, ["catalog", "build", str(plan), "--db", str(db), "--dry-run"])
    assert dry.exit_code == 0 and "pending" not in dry.output and "done" in dry.output

    out = tmp_path / "msccl"
    exported = cli_runner.invoke(main, ["catalog", "export", "--db", str(db), "--msccl", str(out)])
    assert exported.exit_code == 0, exported.output
    assert (out / "report.md").is_file() and (out / "fully_connected_4" / "msccl.env").is_file()


@pytest.mark.parametrize("args", [
    ["catalog", "list", "--db", "{tmp}/absent.sqlite"],
    ["catalog", "show", "zzzz", "--db", "{db}"],
    ["catalog", "show", "abcdef", "--db", "{db}"],
    ["catalog", "best", "warp_drive", "allreduce", "1MB", "--db", "{db}"],
    ["catalog", "best", "fully_connected:4", "alltoall", "1MB", "--db", "{db}"],
    ["catalog", "best", "fully_connected:4", "allreduce", "lots", "--db", "{db}"],
    ["catalog", "export", "--db", "{tmp}/absent.sqlite", "--msccl", "{tmp}/out"],
    ["catalog", "export", "--db", "{db}", "--msccl", "{tmp}/no/such/dir/out"],
    ["catalog", "build", "{tmp}/absent.toml", "--db", "{db}"],
    ["catalog", "build", "{tmp}/bad.toml", "--db", "{db}"],
])
def test_bad_input_is_one_line_and_exit_2(built: tuple[Path, Path], cli_runner, tmp_path: Path,
                                          args: list[str]) -> None:
    _, db = built
    (tmp_path / "bad.toml").write_text('[[targets]]\ntopology = "warp_drive"\ncollectives = ["allgather"]\n')
    argv = [a.format(tmp=tmp_path, db=db) for a in args]
    result = cli_runner.invoke(main, argv)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
