"""The MSCCL++ paper's algorithms: which fit which machine, and that each one's plan passes the interpreter."""

import json

import pytest

from collsynth.algorithms import AlgorithmError
from collsynth.algorithms.mscclpp import MSCCLPP_VARIANTS, supports_switch_channels, switch_allreduce_plan
from collsynth.catalog.export_mscclpp import export_mscclpp, mscclpp_plans, variant_fits
from collsynth.cli import main
from collsynth.runtime.plan import execute_plan
from collsynth.topologies.io import resolve_topology


def test_variants_fit_the_machines_they_are_for():
    names = {v.name: v for v in MSCCLPP_VARIANTS}
    assert set(names) == {"mscclpp_1pa_ll", "mscclpp_2pa_memory", "mscclpp_2pa_port", "mscclpp_2pa_switch",
                          "mscclpp_2ph"}
    ndv4, h100, two = (resolve_topology(t) for t in ("ndv4", "h100_nvswitch", "2xndv4"))
    assert variant_fits(names["mscclpp_2pa_switch"], ndv4) is not None
    assert variant_fits(names["mscclpp_2pa_switch"], h100) is None
    assert variant_fits(names["mscclpp_2ph"], ndv4) is not None
    assert variant_fits(names["mscclpp_2ph"], two) is None
    assert supports_switch_channels("h100_nvswitch") and not supports_switch_channels("ndv4")


@pytest.mark.parametrize("topology_name, expected", [
    ("h100_nvswitch", {"mscclpp_1pa_ll", "mscclpp_2pa_memory", "mscclpp_2pa_port", "mscclpp_2pa_switch"}),
    ("2xndv4", {"mscclpp_2pa_port", "mscclpp_2ph"}),
])
def test_every_fitting_variant_passes_the_plan_interpreter(topology_name, expected):
    plans = mscclpp_plans(resolve_topology(topology_name))
    assert {item.variant.name for item in plans} == expected
    for item in plans:
        assert execute_plan(item.plan, dtype="int32").passed
        assert item.plan["protocol"] == item.variant.protocol


def test_switch_plan_shape():
    plan = switch_allreduce_plan(8)
    assert plan["inplace"] and len(plan["gpus"]) == 8
    for rank, gpu in enumerate(plan["gpus"]):
        names = [op["name"] for op in gpu["threadblocks"][0]["ops"]]
        assert names == ["signal", "wait", "glres", "signal", "wait"]
        glres = gpu["threadblocks"][0]["ops"][2]
        assert glres["src_buff"][0]["index"] == glres["dst_buff"][0]["index"] == rank
    with pytest.raises(AlgorithmError):
        switch_allreduce_plan(1)


def test_export_writes_the_winning_plans_with_contiguous_size_ranges(tmp_path):
    paths = export_mscclpp([resolve_topology("h100_nvswitch")], tmp_path)
    plans = sorted((json.loads(p.read_text()) for p in paths), key=lambda plan: plan["min_message_size"])
    assert len(plans) >= 2
    assert plans[0]["min_message_size"] == 0 and plans[-1]["max_message_size"] == 2**64 - 1
    for low, high in zip(plans, plans[1:], strict=False):
        assert high["min_message_size"] == low["max_message_size"] + 1
    for path, plan in zip(paths, (json.loads(p.read_text()) for p in paths), strict=True):
        assert path.parent == tmp_path / "h100_nvswitch" and path.stem == plan["name"]
        assert execute_plan(plan).passed
    assert "mscclpp_2pa_switch" in {p["name"] for p in plans}  # the model's large-size winner on NVLS


def test_cli_export_run_and_catalog_export(cli_runner, tmp_path):
    xml = tmp_path / "ap.xml"
    result = cli_runner.invoke(main, ["algorithms", "show", "allpairs_allreduce_two_phase", "--ranks", "4",
                                      "-o", str(xml)])
    assert result.exit_code == 0, result.output
    plan_path = tmp_path / "ap.json"
    result = cli_runner.invoke(main, ["export", "mscclpp", str(xml), "-o", str(plan_path), "--groups", "1"])
    assert result.exit_code == 0, result.output
    assert all(len(gpu["threadblocks"]) == 1 for gpu in json.loads(plan_path.read_text())["gpus"])
    assert "plan interpreter" in result.output and plan_path.exists()
    result = cli_runner.invoke(main, ["export", "mscclpp", str(xml), "-o", str(plan_path)])
    assert result.exit_code == 0, result.output
    assert all(len(gpu["threadblocks"]) > 1 for gpu in json.loads(plan_path.read_text())["gpus"])
    result = cli_runner.invoke(main, ["run", str(plan_path), "--size", "64KB"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("PASS  AllReduce  ngpus=4  size=64KB") and "backend=mscclpp-plan" in result.output
    bad = json.loads(plan_path.read_text())
    del bad["gpus"][0]["input_chunks"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    result = cli_runner.invoke(main, ["run", str(tmp_path / "bad.json")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "input_chunks" in result.output
    stuck = json.loads(plan_path.read_text())
    for gpu in stuck["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if op["name"] != "signal"]
    (tmp_path / "stuck.json").write_text(json.dumps(stuck))
    result = cli_runner.invoke(main, ["run", str(tmp_path / "stuck.json")])
    assert result.exit_code == 1 and "deadlock" in result.output
    out = tmp_path / "plans"
    result = cli_runner.invoke(main, ["catalog", "export", "--db", str(tmp_path / "c.db"), "--mscclpp", str(out),
                                      "-t", "h100_nvswitch"])
    assert result.exit_code == 0, result.output
    assert len(list((out / "h100_nvswitch").glob("*.json"))) >= 2


def test_cli_export_refuses_ll128_with_one_line(cli_runner, tmp_path):
    xml = tmp_path / "ring.xml"
    cli_runner.invoke(main, ["algorithms", "show", "ring_allreduce", "--ranks", "4", "--protocol", "LL128",
                             "-o", str(xml)])
    result = cli_runner.invoke(main, ["export", "mscclpp", str(xml), "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 2 and "LL128" in result.output
    assert not (tmp_path / "p.json").exists()


def test_choose_per_size_picks_the_fastest_prediction():
    from collsynth.catalog.export_mscclpp import choose_per_size
    from collsynth.sim import simulate
    from collsynth.sim.mscclpp import simulate_plan

    topology = resolve_topology("h100_nvswitch")
    sizes = [1024, 1 << 30]
    choices = choose_per_size(topology, sizes)
    assert [c.size_bytes for c in choices] == sizes
    for k, choice in enumerate(choices):
        for item in mscclpp_plans(topology):
            assert choice.time_us <= simulate_plan(item.plan, topology, sizes).rows[k].time_us + 1e-9
            if item.ir is not None:
                assert choice.time_us <= simulate(item.ir, topology, sizes).rows[k].time_us + 1e-9
