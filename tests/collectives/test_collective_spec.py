"""Collective specs: layouts, pre/postconditions, reference outputs, duals, user-defined collectives.

Expected values are written independently of spec.py, from the definitions in its module docstring."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import (
    STANDARD,
    Collective,
    CollectiveError,
    alltonext,
    canonical_name,
    custom_collective,
    display_name,
    load_collective,
    make_collective,
    resolve_collective,
)
from collsynth.core.errors import CollsynthError

ROOTED = ("broadcast", "gather", "scatter", "reduce")
SIZES = [(1, 1), (2, 1), (3, 2), (4, 1), (5, 3), (8, 2)]


def expected_sets(name: str, n: int, k: int, root: int) -> tuple[list[set[int]], list[set[int]], int, int]:
    """(pre, post, input_chunks, output_chunks) straight from the table in spec.py's docstring."""
    everyone = set(range(n))
    if name == "allgather":
        return [{c // k} for c in range(n * k)], [everyone] * (n * k), k, n * k
    if name == "alltoall":
        return ([{c // k // n} for c in range(n * n * k)], [{(c // k) % n} for c in range(n * n * k)], n * k, n * k)
    if name == "broadcast":
        return [{root}] * k, [everyone] * k, k, k
    if name == "gather":
        return [{c // k} for c in range(n * k)], [{root}] * (n * k), k, n * k
    if name == "scatter":
        return [{root}] * (n * k), [{c // k} for c in range(n * k)], n * k, k
    if name == "reduce":
        return [everyone] * k, [{root}] * k, k, k
    if name == "reducescatter":
        return [everyone] * (n * k), [{c // k} for c in range(n * k)], n * k, k
    if name == "allreduce":
        return [everyone] * (n * k), [everyone] * (n * k), n * k, n * k
    raise AssertionError(name)


def expected_outputs(name: str, inputs: list[np.ndarray], n: int, k: int, root: int) -> list[dict[int, np.ndarray]]:
    """Per rank: {output index: expected value}, computed directly from the collective's meaning."""
    out: list[dict[int, np.ndarray]] = [{} for _ in range(n)]
    total = sum(inputs)  # element-wise sum over ranks (same-shape inputs)
    for r in range(n):
        if name == "allgather":
            out[r] = {s * k + i: inputs[s][i] for s in range(n) for i in range(k)}
        elif name == "alltoall":
            out[r] = {s * k + i: inputs[s][r * k + i] for s in range(n) for i in range(k)}
        elif name == "broadcast":
            out[r] = {i: inputs[root][i] for i in range(k)}
        elif name == "gather" and r == root:
            out[r] = {s * k + i: inputs[s][i] for s in range(n) for i in range(k)}
        elif name == "scatter":
            out[r] = {i: inputs[root][r * k + i] for i in range(k)}
        elif name == "reduce" and r == root:
            out[r] = {i: total[i] for i in range(k)}
        elif name == "reducescatter":
            out[r] = {i: total[r * k + i] for i in range(k)}
        elif name == "allreduce":
            out[r] = {c: total[c] for c in range(n * k)}
    return out


def check_layout_is_a_bijection(coll: Collective) -> None:
    for placement, size, label in ((coll.inputs, coll.input_chunks, "input"),
                                   (coll.outputs, coll.output_chunks, "output")):
        slots = [(r, i) for _, r, i in placement]
        assert len(slots) == len(set(slots)), f"two chunks share a {label} slot"
        keys = [(c, r) for c, r, _ in placement]
        assert len(keys) == len(set(keys)), f"a chunk has two {label} slots on one rank"
        assert all(0 <= i < size for _, _, i in placement), f"{label} index outside the buffer"
        assert all(0 <= c < coll.num_chunks and 0 <= r < coll.num_ranks for c, r, _ in placement)
    for c, r, i in coll.inputs:
        assert coll.input_index(c, r) == i and coll.input_chunk(r, i) == c
    for c, r, i in coll.outputs:
        assert coll.output_index(c, r) == i and coll.output_chunk(r, i) == c
    # every chunk starts somewhere and is wanted somewhere
    assert all(coll.pre[c] for c in range(coll.num_chunks))
    assert all(coll.post[c] for c in range(coll.num_chunks))


def check_reference_outputs(coll: Collective, seed: int) -> None:
    n, k, root = coll.num_ranks, coll.chunks, coll.root if coll.root is not None else 0
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-100, 100, size=(coll.input_chunks, 3)).astype(np.float64) for _ in range(n)]
    result = coll.reference_outputs(inputs)
    want = expected_outputs(coll.name, inputs, n, k, root)
    assert len(result) == n
    for r, (expected, checked) in enumerate(result):
        assert expected.shape == (coll.output_chunks, 3)
        assert set(np.flatnonzero(checked)) == set(want[r])
        for i, value in want[r].items():
            np.testing.assert_array_equal(expected[i], value)


@pytest.mark.parametrize("name", sorted(STANDARD))
@pytest.mark.parametrize(("n", "k"), SIZES)
def test_standard_layouts_and_conditions(name, n, k):
    root = n - 1 if name in ROOTED else None
    coll = make_collective(name, n, k, root=root)
    check_layout_is_a_bijection(coll)
    pre, post, in_size, out_size = expected_sets(name, n, k, root if root is not None else 0)
    assert [set(x) for x in coll.pre] == pre
    assert [set(x) for x in coll.post] == post
    assert (coll.input_chunks, coll.output_chunks, coll.num_chunks) == (in_size, out_size, len(pre))
    assert coll.combining == (name in ("reduce", "reducescatter", "allreduce"))
    assert coll.root == root
    for c in range(coll.num_chunks):
        for r in range(n):
            assert coll.precondition(c, r) == (r in pre[c])
            assert coll.postcondition(c, r) == (r in post[c])


def test_layouts_match_the_documented_slots():
    n, k = 3, 2
    ag = make_collective("allgather", n, k)
    assert ag.input_index(2 * k + 1, 2) == 1 and ag.output_index(2 * k + 1, 0) == 2 * k + 1
    a2a = make_collective("alltoall", n, k)
    c = (1 * n + 2) * k + 1  # from 1 to 2, piece 1
    assert a2a.input_index(c, 1) == 2 * k + 1 and a2a.output_index(c, 2) == 1 * k + 1
    sc = make_collective("scatter", n, k, root=1)
    assert sc.input_index(2 * k, 1) == 2 * k and sc.output_index(2 * k, 2) == 0
    rs = make_collective("reducescatter", n, k)
    assert rs.input_index(k + 1, 0) == k + 1 and rs.output_index(k + 1, 1) == 1


@pytest.mark.parametrize("name", sorted(STANDARD))
@pytest.mark.parametrize(("n", "k"), [(1, 1), (3, 1), (4, 2), (6, 3)])
def test_reference_outputs(name, n, k):
    coll = make_collective(name, n, k, root=(1 % n) if name in ROOTED else None)
    check_reference_outputs(coll, seed=n * 10 + k)


def test_reference_outputs_sum_in_float32():
    coll = make_collective("allreduce", 3, 1)
    inputs = [np.full((3, 2), v, dtype=np.float32) for v in (1.5, 2.25, -0.75)]
    for expected, checked in coll.reference_outputs(inputs):
        assert expected.dtype == np.float32 and checked.all()
        np.testing.assert_allclose(expected, 3.0)


@pytest.mark.parametrize(("name", "dual"), [("reduce", "broadcast"), ("reducescatter", "allgather")])
@pytest.mark.parametrize(("n", "k"), [(2, 1), (4, 2), (5, 1)])
def test_non_combining_dual_swaps_pre_and_post(name, dual, n, k):
    coll = make_collective(name, n, k, root=n - 1 if name == "reduce" else None)
    other = coll.non_combining_dual()
    assert other.name == dual and not other.combining
    assert (other.num_ranks, other.chunks, other.root) == (n, k, coll.root)
    assert other.pre == coll.post and other.post == coll.pre


@pytest.mark.parametrize("name", ["allreduce", "allgather", "alltoall", "broadcast", "gather", "scatter"])
def test_no_dual_for_the_others(name):
    with pytest.raises(CollectiveError, match="no non-combining dual"):
        make_collective(name, 4).non_combining_dual()


@pytest.mark.parametrize("spelling", ["AllGather", "all_gather", "all-gather", "ALLGATHER", "All Gather"])
def test_forgiving_names(spelling):
    assert canonical_name(spelling) == "allgather"
    assert make_collective(spelling, 4) == make_collective("allgather", 4)
    assert display_name(spelling) == "AllGather"


def test_with_chunks_and_inplace():
    coll = make_collective("reduce", 4, 1, root=2)
    assert coll.with_chunks(3) == make_collective("reduce", 4, 3, root=2)
    assert coll.with_inplace(True).inplace and not coll.inplace
    with pytest.raises(CollectiveError, match="re-chunk"):
        alltonext(4).with_chunks(2)


@pytest.mark.parametrize(("args", "kwargs", "message"), [
    (("allfoo", 4), {}, "unknown collective"),
    (("allgather", 0), {}, "at least 1 rank"),
    (("allgather", 4, 0), {}, "chunks must be >= 1"),
    (("broadcast", 4), {"root": 4}, "root 4 is outside"),
    (("reduce", 4), {"root": -1}, "outside"),
])
def test_make_collective_errors(args, kwargs, message):
    with pytest.raises(CollectiveError, match=message) as info:
        make_collective(*args, **kwargs)
    assert isinstance(info.value, CollsynthError) and "\n" not in str(info.value)


def test_unrooted_collectives_ignore_root_and_rooted_default_to_zero():
    assert make_collective("allgather", 4, root=3).root is None
    assert make_collective("gather", 4).root == 0


# --- user-defined collectives -------------------------------------------------------------------

def test_alltonext():
    coll = alltonext(4, chunks=2)
    assert coll.num_chunks == 6 and not coll.combining
    assert [set(x) for x in coll.pre] == [{c // 2} for c in range(6)]
    assert [set(x) for x in coll.post] == [{c // 2 + 1} for c in range(6)]
    check_layout_is_a_bijection(coll)
    inputs = [np.arange(2 * 3, dtype=np.float64).reshape(2, 3) + 10 * r for r in range(4)]
    result = coll.reference_outputs(inputs)
    assert not result[0][1].any()
    for r in range(1, 4):
        np.testing.assert_array_equal(result[r][0], inputs[r - 1])


def test_custom_collective_dict_and_json_round_trip(tmp_path):
    coll = alltonext(5)
    data = coll.to_dict()
    assert Collective.from_dict(data) == coll
    path = tmp_path / "a2n.json"
    path.write_text(json.dumps(data))
    assert load_collective(path) == coll
    assert resolve_collective(str(path), 5) == coll
    with pytest.raises(CollectiveError, match="defined for 5 ranks"):
        resolve_collective(str(path), 4)


def test_standard_collective_from_a_short_dict():
    assert Collective.from_dict({"name": "Broadcast", "num_ranks": 4, "chunks": 2, "root": 3}) == \
        make_collective("broadcast", 4, 2, root=3)
    assert Collective.from_dict(make_collective("alltoall", 3, 2).to_dict()) == make_collective("alltoall", 3, 2)


def test_custom_combining_collective():
    # ranks 0 and 1 contribute to chunk 0, which rank 2 must hold summed
    coll = custom_collective("pairsum", 3, [(0, 0, 0), (0, 1, 0)], [(0, 2, 0)], combining=True)
    assert coll.pre[0] == {0, 1} and coll.post[0] == {2}
    inputs = [np.array([[1.0]]), np.array([[2.0]]), np.array([[40.0]])]
    expected, checked = coll.reference_outputs(inputs)[2]
    assert checked.tolist() == [True] and expected[0, 0] == 3.0


@pytest.mark.parametrize(("data", "message"), [
    ({"num_ranks": 2, "inputs": [], "outputs": []}, "name: missing"),
    ({"name": "x", "inputs": [[0, 0, 0]], "outputs": [[0, 1, 0]]}, "num_ranks: missing"),
    ({"name": "x", "num_ranks": 2, "outputs": [[0, 1, 0]]}, "give both 'inputs' and 'outputs'"),
    ({"name": "x", "num_ranks": 2}, "not a standard collective; give its 'inputs'"),
    ({"name": "x", "num_ranks": 2, "inputs": [], "outputs": []}, "non-empty"),
    ({"name": "x", "num_ranks": 2, "inputs": [[0, 0, 0]], "outputs": [[0, 2, 0]]}, "rank 2 is outside"),
    ({"name": "x", "num_ranks": 2, "inputs": [[0, 0, 0]], "outputs": [[1, 1, 0]]}, "no rank holds them"),
    ({"name": "x", "num_ranks": 2, "inputs": [[0, 0, 0], [1, 0, 0]], "outputs": [[0, 1, 0]]}, "share one buffer slot"),
    ({"name": "x", "num_ranks": 2, "inputs": [[0, 0, -1]], "outputs": [[0, 1, 0]]}, "greater than or equal to 0"),
    ({"name": "x", "num_ranks": 2, "inputs": [[0, 0]], "outputs": [[0, 1, 0]]}, "at least 3 items"),
    ({"name": "x", "num_ranks": "two", "inputs": [[0, 0, 0]], "outputs": [[0, 1, 0]]}, "valid integer"),
    ({"name": "allgather", "num_ranks": 4, "chunks": 0}, "chunks: input should be greater than or equal to 1"),
    ({"name": "allgather", "num_ranks": 4, "inplace": "no"}, "inplace: input should be a valid boolean"),
    ({"name": "allgather", "num_ranks": 4, "chunk": 2}, "unknown key; did you mean 'chunks'"),
    ({"name": "allgather", "num_ranks": 4, "chunks": 1000000}, "above the cap of 256 chunks per rank"),
])
def test_custom_collective_errors(data, message):
    with pytest.raises(CollectiveError, match=message) as info:
        Collective.from_dict(data)
    assert "\n" not in str(info.value)


def test_load_collective_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(CollectiveError, match="not valid JSON"):
        load_collective(bad)
    bad.write_text("[1]")
    with pytest.raises(CollectiveError, match="one object"):
        load_collective(bad)
    with pytest.raises(CollectiveError, match="no such file"):
        load_collective(tmp_path / "missing.json")
    with pytest.raises(CollectiveError, match="unknown collective"):
        resolve_collective("allfoo", 4)


# --- property test ------------------------------------------------------------------------------

@given(name=st.sampled_from(sorted(STANDARD)), n=st.integers(1, 7), k=st.integers(1, 4), root_pick=st.integers(0, 6),
       seed=st.integers(0, 2**16))
def test_property_layout_conditions_and_reference(name, n, k, root_pick, seed):
    root = root_pick % n if name in ROOTED else None
    coll = make_collective(name, n, k, root=root)
    check_layout_is_a_bijection(coll)
    pre, post, _, _ = expected_sets(name, n, k, root if root is not None else 0)
    assert [set(x) for x in coll.pre] == pre and [set(x) for x in coll.post] == post
    check_reference_outputs(coll, seed)
    # the JSON form rebuilds the same collective, as standard and as user-defined
    assert Collective.from_dict(coll.to_dict()) == coll
    as_custom = custom_collective(coll.name, n, coll.inputs, coll.outputs, combining=coll.combining, chunks=k,
                                  input_chunks=coll.input_chunks, output_chunks=coll.output_chunks)
    assert (as_custom.pre, as_custom.post) == (coll.pre, coll.post)


@pytest.mark.parametrize("name", ROOTED)
def test_rooted_collective_keeps_its_root_through_json(name):
    coll = make_collective(name, 4, 2, root=3)
    back = Collective.from_dict(json.loads(json.dumps(coll.to_dict())))
    assert back == coll and back.root == 3
    assert back.with_chunks(1).root == 3
