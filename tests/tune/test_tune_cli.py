"""`collsynth tune`: the table per size, the report, and bad input as one line with exit code 2."""

import json

from test_tune_search import ring_allgather

from collsynth.cli import main


def test_tune_prints_best_per_size_and_writes_report(cli_runner, tmp_path):
    algo = tmp_path / "ring.json"
    algo.write_text(ring_allgather(4).to_json())
    out = tmp_path / "report"
    result = cli_runner.invoke(main, ["tune", "ring:4", "allgather", "--sizes", "1KB:64KB", "-a", str(algo),
                                      "--report", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("#")
             and not line.startswith("wrote") and " B: " not in line]
    assert [line.split()[0] for line in lines] == ["1KB", "4KB", "16KB", "64KB"]
    assert "evaluations" in result.output
    data = json.loads((out / "tune.json").read_text())
    assert [s["size"] for s in data["sizes"]] == [1024, 4096, 16384, 65536]
    assert all(s["best"]["algorithm"] in ("syn:ring-ag", "lib:ring_allgather") for s in data["sizes"])
    for name in ("tune.md", "search.png", "busbw.png"):
        assert (out / name).stat().st_size > 0


def test_bad_input_is_one_line_and_exit_2(cli_runner, tmp_path):
    algo = tmp_path / "ring.json"
    algo.write_text(ring_allgather(4).to_json())
    cases = [
        (["tune", "ring:4", "allgather", "-a", str(tmp_path / "missing.json")], "does not exist"),
        (["tune", "ring:4", "allgather", "--sizes", "1MB:1KB", "-a", str(algo)], "empty"),
        (["tune", "ring:4", "allgather", "--sizes", "1KB:100TB", "-a", str(algo)], "absurd"),
        (["tune", "ring:8", "allgather", "-a", str(algo)], "ranks"),
        (["tune", "ring:4", "allsorts", "-a", str(algo)], "unknown collective"),
    ]
    for args, message in cases:
        result = cli_runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], result.output
        assert "Traceback" not in result.output


def test_ctrl_c_keeps_the_sizes_already_tuned(cli_runner, tmp_path, monkeypatch):
    import collsynth.tune.search as search

    real = search.tune_size
    calls = []

    def interrupted_on_second(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "tune_size", interrupted_on_second)
    algo = tmp_path / "ring.json"
    algo.write_text(ring_allgather(4).to_json())
    out = tmp_path / "report"
    result = cli_runner.invoke(main, ["tune", "ring:4", "allgather", "--sizes", "1KB:64KB", "-a", str(algo),
                                      "--report", str(out)])
    assert result.exit_code == 130
    assert "interrupted" in result.output
    data = json.loads((out / "tune.json").read_text())
    assert data["interrupted"] and [s["size"] for s in data["sizes"]] == [1024]
