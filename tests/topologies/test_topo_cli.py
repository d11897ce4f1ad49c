"""`collsynth topo list|show|draw` through click's CliRunner."""

import json

import pytest

from collsynth.cli import main
from collsynth.topologies import BUILTIN_TOPOLOGIES, builtin


def test_list_names_every_builtin_with_ranks(cli_runner):
    result = cli_runner.invoke(main, ["topo", "list"])
    assert result.exit_code == 0, result.output
    for spec in BUILTIN_TOPOLOGIES.values():
        assert spec.name in result.output
    assert "dgx_a100" in result.output and "2xndv2" in result.output
    assert "AxBxC" in result.output and "2^D" in result.output
    assert "InfiniBand EDR" in result.output  # link classes with their costs


def test_show_prints_links_switches_nodes_and_fingerprint(cli_runner):
    result = cli_runner.invoke(main, ["topo", "show", "2xndv2", "--all"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert builtin("2xndv2").fingerprint() in out
    assert "src" in out and "beta us/MB" in out and "ib" in out and "nvlink" in out
    assert "node1.nic0_out" in out
    assert "node 0: ranks 0-7" in out and "nic 1: ranks 8-15" in out
    assert "more links" not in out


def test_show_truncates_large_tables_unless_all(cli_runner):
    result = cli_runner.invoke(main, ["topo", "show", "dgx2"])
    assert result.exit_code == 0, result.output
    assert "176 more links" in result.output  # 240 links, 64 shown


def test_show_json_is_our_schema(cli_runner):
    result = cli_runner.invoke(main, ["topo", "show", "ring:3", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == builtin("ring:3").to_dict()


def test_show_a_json_file(cli_runner, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(builtin("line:3").to_dict()))
    result = cli_runner.invoke(main, ["topo", "show", str(path)])
    assert result.exit_code == 0, result.output
    assert builtin("line:3").fingerprint() in result.output


def test_draw_writes_png(cli_runner, tmp_path):
    out = tmp_path / "dgx1.png"
    result = cli_runner.invoke(main, ["topo", "draw", "dgx1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in result.output


@pytest.mark.parametrize("args", [
    ["topo", "show", "nosuch"],
    ["topo", "show", "ring:x"],
    ["topo", "show", "{tmp}/missing.json"],
    ["topo", "draw", "dgx3", "-o", "{tmp}/x.png"],
    ["topo", "draw", "ring:4", "-o", "{tmp}/x.bmpx"],
    ["topo", "draw", "ring:4", "-o", "{tmp}/no/such/dir/x.png"],
])
def test_bad_input_exits_2_with_one_line(cli_runner, args, tmp_path):
    result = cli_runner.invoke(main, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
