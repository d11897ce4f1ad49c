"""`collsynth synth milp` end to end."""

import json

import pytest

from collsynth.cli import main
from collsynth.schedule import verify
from collsynth.schedule.algorithm import Algorithm

NDV2_1MB = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
            "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
SK1_N1 = {"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [],
          "hyperparameters": {"input_chunkup": 1}}
SK1_N2 = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
          "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
          "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}


@pytest.fixture
def files(tmp_path):
    topo = tmp_path / "topo-ndv2-1MB.json"
    topo.write_text(json.dumps(NDV2_1MB))
    sk1 = tmp_path / "sk1.json"
    sk1.write_text(json.dumps(SK1_N1))
    return tmp_path, topo, sk1


def test_synth_milp_writes_algorithm_and_report(cli_runner, files):
    tmp, topo, sk1 = files
    out = tmp / "algo.json"
    result = cli_runner.invoke(main, ["synth", "milp", str(topo), "allgather", "--sketch", str(sk1), "--size", "1MB",
                                      "--solver", "highs", "--time-limit", "30", "-o", str(out),
                                      "--report", str(tmp / "rep"), "--taccl-costs", "--timeline"])
    assert result.exit_code == 0, result.output
    assert "routing MILP" in result.output and "predicted time 69.000 us" in result.output
    assert "budget 30 s for the whole run" in result.output  # --time-limit is the budget of the whole run
    assert "0->1 |" in result.output  # the text timeline
    algo = Algorithm.load(out)
    verify(algo)
    assert algo.provenance["synthesizer"] == "milp" and algo.provenance["predicted_us"] == pytest.approx(69.0)
    assert (tmp / "rep" / "timeline.png").is_file() and (tmp / "rep" / "report.md").is_file()


def test_one_node_profile_expands_to_the_sketchs_nodes(cli_runner, files):
    tmp, topo, _ = files
    sk = tmp / "sk1-n2.json"
    sk.write_text(json.dumps(SK1_N2))
    # a short budget: only the expansion is checked here (the group spread of this case takes ~20 s)
    result = cli_runner.invoke(main, ["synth", "milp", str(topo), "allgather", "--sketch", str(sk), "--solver",
                                      "highs", "--time-limit", "8"])
    assert result.exit_code == 0, result.output
    assert "expanded to 2 nodes" in result.output and "ranks=16" in result.output


@pytest.mark.parametrize("sketch, words", [
    ({**SK1_N1, "intranode_sketch": {"strategy": "ring"}}, "intranode_sketch.strategy"),
    ({**SK1_N2, "internode_sketch": {"strategy": "relay", "internode_conn": {"12": [1]}}}, "outside 0..7"),
    ({**SK1_N2, "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]},
                                     "gpus_to_sender_rev_map": {"0": [0, 1, 2]}}}, "have no sender"),
    ({**SK1_N1, "symmetry_offsets": [[1, 8]]}, "not a symmetry"),
])
def test_bad_sketches_exit_2_with_one_line(cli_runner, files, sketch, words):
    tmp, topo, _ = files
    bad = tmp / "bad.json"
    bad.write_text(json.dumps(sketch))
    result = cli_runner.invoke(main, ["synth", "milp", str(topo), "allgather", "--sketch", str(bad), "--solver",
                                      "highs"])
    assert result.exit_code == 2
    lines = [x for x in result.output.strip().splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0]
    assert "Traceback" not in result.output


def test_bad_options_exit_2(cli_runner, files):
    tmp, topo, sk1 = files
    for extra, words in ((["--size", "lots"], "size"), (["--gap", "-1"], "--gap"),
                         (["--time-limit", "0"], "time limit")):
        result = cli_runner.invoke(main, ["synth", "milp", str(topo), "allgather", "--sketch", str(sk1)] + extra)
        assert result.exit_code == 2 and words in result.output
    (tmp / "broken.json").write_text("{not json")
    result = cli_runner.invoke(main, ["synth", "milp", str(topo), "allgather", "--sketch", str(tmp / "broken.json")])
    assert result.exit_code == 2 and "not valid JSON" in result.output
