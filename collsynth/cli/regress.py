"""`collsynth regress [--quick] [--report DIR]`: synthesized vs hand-written, against the stored baseline."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from collsynth.cli.params import OutputPath


@click.command("regress")
@click.option("--quick", is_flag=True, help="the small suite that CI runs (under 3 minutes on 2 cores)")
@click.option("--suite", "suite_path", type=click.Path(dir_okay=False, path_type=Path),
              help="run this suite (a catalog plan, TOML) instead of the shipped quick/full suite")
@click.option("--report", "report_dir", type=OutputPath(file_okay=False, path_type=Path),
              help="write report.md, results.json and busbw plots into this directory")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="work items run in parallel processes")
@click.option("--tolerance", default=0.05, show_default=True, type=float,
              help="relative slowdown against the baseline that counts as a regression")
@click.option("--baseline", "baseline_path", type=click.Path(dir_okay=False, path_type=Path),
              help="baseline JSON (default: the one shipped in collsynth/regress/baseline.json)")
@click.option("--update-baseline", is_flag=True, help="record this run's times as the new baseline for the suite")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              help="keep the run's catalog in this SQLite file (re-running then resumes it)")
def regress(quick: bool, suite_path: Path | None, report_dir: Path | None, jobs: int, tolerance: float,
            baseline_path: Path | None, update_baseline: bool, db_path: Path | None) -> None:
    """Compare synthesized algorithms with the hand-written library on the same topologies: correctness on the
    interpreter, predicted time per size, who wins and by how much. Exits 1 on a regression (a wrong result,
    or slower than the baseline beyond the tolerance), 0 otherwise."""
    from collsynth.catalog import load_plan
    from collsynth.core.errors import CollsynthError
    from collsynth.core.signals import keeping_finished_work
    from collsynth.regress import (
        BASELINE_PATH,
        RegressInterrupted,
        load_baseline,
        load_suite,
        save_baseline,
        summary_text,
        updated_baseline,
        write_report,
    )
    from collsynth.regress import regress as run

    if quick and suite_path is not None:
        raise CollsynthError("give --quick or --suite SUITE.toml, not both")

    path = baseline_path or BASELINE_PATH
    if baseline_path is not None and not update_baseline and not baseline_path.is_file():
        raise CollsynthError(f"--baseline {baseline_path}: no such file; give an existing baseline JSON, or add "
                             "--update-baseline to create it from this run")
    baseline = load_baseline(path)
    plan = load_plan(suite_path) if suite_path is not None else load_suite(quick)
    try:
        result = run(plan, baseline, tolerance=tolerance, jobs=jobs, db_path=db_path)
    except RegressInterrupted as stop:  # the cases finished are reported (marked interrupted); no baseline
        with keeping_finished_work(stop):
            click.echo(summary_text(stop.result))
            if report_dir is not None:
                write_report(stop.result, report_dir)
                click.echo(f"report: {report_dir / 'report.md'}")
        raise
    click.echo(summary_text(result))
    if report_dir is not None:
        write_report(result, report_dir)
        click.echo(f"report: {report_dir / 'report.md'}")
    if update_baseline:
        # Failures stay regressions whatever the baseline says, so recording the verified entries is safe.
        save_baseline(updated_baseline(baseline, result.suite, result.dtype, result.times()), path)
        click.echo(f"baseline updated: {path} ({len(result.times())} verified entries of suite {result.suite})")
        if result.broken:
            sys.exit(1)
        return
    if not result.passed:
        sys.exit(1)


COMMANDS = (regress,)
