"""The declared plan schema (collsynth.catalog.plan_schema): exact TOML types, finite positive limits, caps,
per-kind synthesizer settings, unknown keys with the closest known key. Every shipped plan passes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from collsynth.catalog import PlanError, load_plan
from collsynth.catalog.plan_schema import check_plan_document

ROOT = Path(__file__).resolve().parents[2]
TARGET = '[[targets]]\ntopology = "ring:4"\ncollectives = ["allgather"]\n'


@pytest.mark.parametrize("path", sorted([*ROOT.glob("plans/**/*.toml"), *ROOT.glob("collsynth/regress/*.toml")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_plan_passes_the_schema(path):
    check_plan_document(tomllib.loads(path.read_text()), f"{path}: ")
    assert load_plan(path).targets


@pytest.mark.parametrize(("text", "needle"), [
    ("[limits]\nmax_chunks = 6.0\n", "'limits.max_chunks' must be a valid integer, got 6.0"),
    ("[compile]\ninplace = \"no\"\n", "'compile.inplace' must be true or false or a list of true/false, got 'no'"),
    ("name = 1979-05-27\n", "'name' must be a valid string"),
    ("[limits]\ntime_limit_s = -1\n", "'limits.time_limit_s' must be > 0, got -1"),
    ("[limits]\nitem_timeout_s = inf\n", "'limits.item_timeout_s' must be a finite number"),
    ("size_factor = 1\n", "'size_factor' must be >= 2, got 1"),
    ("sizes = []\n", "'sizes' is empty, so nothing would be built"),
    ("[[synthesizers]]\nkind = \"pareto\"\nmax_chunk = 3\n",
     "unknown key 'synthesizers[0].max_chunk'; did you mean 'synthesizers[0].max_chunks'?"),
    ("[[synthesizers]]\nkind = \"pareto\"\nsteps = 3\n", "unknown key 'synthesizers[0].steps'"),
    ("[[synthesizers]]\nname = \"x\"\n", "'synthesizers[0].kind' is missing; give one of pareto"),
    ("[[synthesizers]]\nkind = \"instance\"\nchunks = 1000000\nsteps = 2\n",
     "1000000 chunks per rank is above the cap of 256 chunks per rank; raise it with COLLSYNTH_MAX_CHUNKS_PER_RANK=N"),
    ("[[synthesizers]]\nkind = \"instance\"\nchunks = true\nsteps = 2\n", "'synthesizers[0].chunks' must be a valid "
                                                                          "integer, got True"),
    ("[[synthesizers]]\nkind = \"milp\"\nsketch = \"s.json\"\nsize = \"1MB\"\nsolver = \"gurobi\"\n",
     "'synthesizers[0].solver' must be 'highs' or 'cbc', got 'gurobi'"),
    ("[[synthesizers]]\nkind = \"pareto\"\npoints = \"some\"\n", "'synthesizers[0].points' must be 'pareto' or 'all'"),
    (TARGET.replace("ring:4", "ring:4\"\nroot = -1\nx = \"") , "'targets[0].root' must be >= 0, got -1"),
    (TARGET + "topolgy = \"x\"\n", "unknown key 'targets[0].topolgy'; did you mean 'targets[0].topology'?"),
])
def test_bad_plans_are_refused_by_the_schema_in_one_line(tmp_path, text, needle):
    path = tmp_path / "plan.toml"
    path.write_text(text + TARGET)
    with pytest.raises(PlanError) as info:
        load_plan(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and needle in message and "\n" not in message, message
