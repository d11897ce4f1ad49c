"""Reports link only files that exist: a Ctrl-C while a picture is drawn never leaves report.md pointing at it."""

from __future__ import annotations

import re

from collsynth.cli import main


def _links_exist(out) -> bool:
    report = (out / "report.md").read_text()
    return all((out / target).exists() for target in re.findall(r"\]\(([^)]+)\)", report))


def test_ctrl_c_while_drawing_the_frontier_leaves_no_dangling_link(cli_runner, tmp_path, monkeypatch):
    import collsynth.synth.report as report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while matplotlib draws frontier.png

    monkeypatch.setattr(report, "plot_frontier", interrupted)
    out = tmp_path / "rep"
    result = cli_runner.invoke(main, ["synth", "pareto", "ring:3", "allgather", "--max-chunks", "1", "--report",
                                      str(out)])
    assert result.exit_code == 130
    assert (out / "frontier.json").exists()  # finished work kept
    assert not (out / "frontier.png").exists()
    assert not (out / "report.md").exists() or _links_exist(out)
