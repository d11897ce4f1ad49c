"""Plan files: parsing, the one-line errors for bad input, expansion into keyed work items."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from collsynth.catalog import PlanError, expand_plan, load_plan, parse_plan
from collsynth.catalog.plan import CompileVariant

MINIMAL = """
sizes = "1KB:64KB"
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather"]
"""


def write(tmp_path: Path, text: str, name: str = "plan.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_minimal_plan_defaults(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, MINIMAL))
    assert plan.name == "plan"
    assert plan.sizes == tuple(1024 * 2**k for k in range(7))
    assert plan.variants == (CompileVariant("Simple", 1, False),)
    assert plan.dtype == "float32"
    items = expand_plan(plan)
    names = sorted(item.param("program") for item in items)
    assert names == ["recursive_doubling_allgather", "ring_allgather"]
    assert all(item.source == "library" for item in items)


def test_full_plan_with_synthesizers_and_variants(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, """
        name = "full"
        dtype = "half"
        sizes = ["1MB", "1KB", "1MB"]
        [compile]
        protocols = ["Simple", "LL"]
        instances = [1, 2]
        [limits]
        time_limit_s = 5
        max_chunks = 3
        [[synthesizers]]
        name = "frontier"
        kind = "pareto"
        [[synthesizers]]
        kind = "instance"
        chunks = 1
        steps = 2
        [[targets]]
        topology = "dgx1"
        collectives = ["AllGather"]
        synthesizers = ["frontier"]
        library = ["ring_allgather"]
    """))
    assert plan.sizes == (1024, 1 << 20)
    assert len(plan.variants) == 4
    frontier = plan.synthesizer("frontier")
    assert frontier.param("max_chunks") == 3 and frontier.param("time_limit_s") == 5.0
    assert plan.synthesizer("instance").param("steps") == 2
    items = expand_plan(plan)
    assert [(item.source, item.synth_name or item.param("program")) for item in items] == [
        ("pareto", "frontier"), ("library", "ring_allgather")]
    assert items[0].collective_name == "allgather"


def test_keys_are_stable_and_depend_on_what_decides_the_result(tmp_path: Path) -> None:
    base = expand_plan(load_plan(write(tmp_path, MINIMAL)))
    again = expand_plan(load_plan(write(tmp_path, MINIMAL, "again.toml")))
    assert [i.key for i in base] == [i.key for i in again]
    # The size grid does not change the key (new sizes are simulated, not rebuilt) ...
    other_sizes = expand_plan(load_plan(write(tmp_path, MINIMAL.replace("1KB:64KB", "1KB:1GB"), "sizes.toml")))
    assert [i.key for i in base] == [i.key for i in other_sizes]
    # ... but compile options, topology and collective do.
    ll = expand_plan(load_plan(write(tmp_path, MINIMAL + '[compile]\nprotocols = ["LL"]\n', "ll.toml")))
    assert not {i.key for i in base} & {i.key for i in ll}
    ring = expand_plan(load_plan(write(tmp_path, MINIMAL.replace("fully_connected:4", "ring:4"), "ring.toml")))
    assert not {i.key for i in base} & {i.key for i in ring}


@pytest.mark.parametrize(("text", "needle"), [
    ("sizes = [", "not valid TOML"),
    ("colour = 1\n" + MINIMAL, "unknown key 'colour'"),
    (MINIMAL + "colour = 1\n", "unknown key 'targets[0].colour'"),
    (MINIMAL.replace("fully_connected:4", "warp_drive"), "targets[0].topology"),
    (MINIMAL.replace('"allgather"', '"allmerge"'), "unknown collective 'allmerge'"),
    (MINIMAL.replace("1KB:64KB", "64KB:1KB"), "is empty"),
    (MINIMAL.replace("1KB:64KB", "lots"), "cannot read size"),
    (MINIMAL + "[[synthesizers]]\nkind = \"magic\"\n", "unknown synthesizer 'magic'"),
    (MINIMAL + "[[synthesizers]]\nkind = \"instance\"\nchunks = 1\n", "needs 'steps'"),
    (MINIMAL + "[[synthesizers]]\nkind = \"pareto\"\nmax_chunks = 0\n", "max_chunks' must be >= 1, got 0"),
    (MINIMAL + "[[synthesizers]]\nkind = \"milp\"\nsketch = \"nope.json\"\nsize = \"1MB\"\n", "no such file"),
    (MINIMAL + "[compile]\nprotocols = [\"Fast\"]\n", "must be 'Simple', 'LL' or 'LL128', got 'Fast'"),
    (MINIMAL + "[compile]\ninstances = [0]\n", "'compile.instances[0]' must be >= 1, got 0"),
    ("sizes = \"1KB:2KB\"\n", "no [[targets]]"),
    (MINIMAL.replace('collectives = ["allgather"]', 'collectives = ["allgather"]\nsynthesizers = ["x"]'),
     "no [[synthesizers]] entry named 'x'"),
    (MINIMAL.replace('collectives = ["allgather"]', 'collectives = ["allgather"]\nlibrary = ["warp"]'),
     "unknown program 'warp'"),
    (MINIMAL.replace('collectives = ["allgather"]', 'collectives = 3'), "must be a string or a list of strings, got 3"),
    ('dtype = "complex"\n' + MINIMAL, "dtype: unknown data type 'complex'"),
    (MINIMAL + "[compile]\nprotocols = []\n", "compile.protocols is empty, so nothing would be built"),
    (MINIMAL + "[compile]\ninstances = []\n", "'compile.instances' is empty"),
    (MINIMAL + "[compile]\nprotocol = [\"LL\"]\n", "unknown key 'compile.protocol'; did you mean 'compile.protocols'?"),
    (MINIMAL + "[limits]\ntime_limit_s = nan\n", "'limits.time_limit_s' must be a finite number"),
    (MINIMAL + "[[synthesizers]]\nkind = \"instance\"\nchunks = 1\nsteps = 100000\n", "COLLSYNTH_MAX_STEPS"),
    ("[a]\n" + "b = " + "[" * 5000 + "]" * 5000 + "\n" + MINIMAL, "not valid TOML"),
])
def test_bad_plans_give_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(PlanError) as info:
        expand_plan(load_plan(path))
    message = str(info.value)
    assert needle in message
    assert "\n" not in message
    assert str(path) in message


def test_missing_plan_file(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no such file; give the path of the plan"):
        load_plan(tmp_path / "absent.toml")


def test_parse_plan_from_mapping() -> None:
    plan = parse_plan({"sizes": "4KB", "targets": [{"topology": "ring:4", "collectives": "allreduce"}]})
    assert plan.sizes == (4096,)
    assert plan.targets[0].collectives == ("allreduce",)


def test_shipped_plans_parse() -> None:
    plans = sorted((Path(__file__).resolve().parents[2] / "plans").glob("*.toml"))
    assert plans, "plans/*.toml ship with the project"
    for path in plans:
        plan = load_plan(path)
        assert expand_plan(plan), path
