"""The array forms of the compiler's common cases give what the instr-by-instr code gives: numpy longest paths
against a direct DP, and the manual placement, the channels of unfused DAGs and fusion's candidate filter
against their loops (each array path turned off by monkeypatch), and the trace by arrays against the trace's loop
(compiler/tracing.py)."""

import random

import numpy as np
import pytest

import collsynth.compiler.dag as dag_module
import collsynth.compiler.merging as merging
import collsynth.compiler.placement as placement
from collsynth.algorithms.registry import library_programs
from collsynth.collectives import make_collective
from collsynth.compiler import compile_program
from collsynth.compiler.paths import longest_paths, out_edges, renumbered_out_edges, stable_order
from collsynth.language.timed import lower_timed
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import resolve_topology


def _dp(n, edges):
    length = [0] * n
    for head in range(n):  # tails < heads: index order is topological
        for tail, h, w in edges:
            if h == head:
                length[head] = max(length[head], length[tail] + w)
    return length


@pytest.mark.parametrize("seed", range(20))
def test_longest_paths_match_a_direct_dp(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    edges = [(t, h, rng.randint(0, 1)) for _ in range(rng.randint(0, 3 * n))
             for t, h in [sorted(rng.sample(range(n), 2))] if n > 1]
    arrays = [np.asarray([e[k] for e in edges], dtype=np.int64) for k in range(3)]
    forward = longest_paths(n, *arrays)
    assert forward.tolist() == _dp(n, edges)
    backward = longest_paths(n, arrays[1], arrays[0], arrays[2])  # reversed edges: the path to an end
    assert backward.tolist() == _dp(n, [(n - 1 - h, n - 1 - t, w) for t, h, w in edges])[::-1]


def test_longest_paths_mark_a_cycle_and_what_follows_it():
    tails, heads = np.asarray([0, 1, 2, 2]), np.asarray([1, 2, 1, 3])  # 1 <-> 2, then 3
    assert longest_paths(5, tails, heads, np.ones(4, dtype=np.int64)).tolist() == [0, -1, -1, -1, 0]


def _forms(program, **options):
    forms = {}
    compile_program(program, after_each=lambda name, form: forms.setdefault(name, form), **options)
    return forms


def _programs():
    yield lower_timed(greedy(resolve_topology("torus:3x3"), make_collective("allgather", 9), 1 << 20).algorithm)
    for topology, collective in (("ring:8", "allreduce"), ("dgx1", "allgather"), ("fully_connected:8", "alltoall")):
        for _, program in library_programs(resolve_topology(topology), collective):
            yield program


@pytest.mark.parametrize("policy", ["manual", "auto"])
def test_array_paths_give_the_loops_forms(monkeypatch, policy):
    for program in _programs():
        fast = _forms(program, threadblock_policy=policy)
        with monkeypatch.context() as m:
            m.setattr(placement, "_all_hinted", lambda sched: None)
            m.setattr(dag_module, "trace_columns", lambda *args: None)
            m.setattr(placement, "_unfused_channels", lambda dag: None)
            m.setattr(merging, "_fusable_receives", lambda dag: [j for j, ins in enumerate(dag.instrs)
                                                                 if ins.kind in ("r", "rrc")])
            slow = _forms(program, threadblock_policy=policy)
        assert fast.keys() == slow.keys()
        for name in fast:
            assert str(fast[name]) == str(slow[name]), (program.name, name)


def test_the_manual_array_placement_is_taken_for_a_fully_hinted_program(monkeypatch):
    program = next(_programs())
    taken = []
    original = placement._all_hinted
    monkeypatch.setattr(placement, "_all_hinted", lambda sched: taken.append(original(sched)) or taken[-1])
    _forms(program, threadblock_policy="manual")
    assert taken and all(p is not None for p in taken)


@pytest.mark.parametrize("bound", [7, 1 << 16, (1 << 16) + 1, 1 << 40])
def test_stable_order_is_numpys_stable_argsort(bound):
    values = np.random.default_rng(bound % 97).integers(0, bound, 5000)
    values[::7] = values[0]  # ties: their order is the input's
    assert np.array_equal(stable_order(values, bound), np.argsort(values, kind="stable"))


@pytest.mark.parametrize("seed", range(5))
def test_renumbered_out_edges_are_those_of_the_renumbered_edges(seed):
    rng = np.random.default_rng(seed)
    n = 60
    tails = rng.integers(0, n, 400)
    heads, weights = rng.integers(0, n, 400), rng.integers(0, 2, 400)
    by_new = rng.permutation(n)
    new_of = np.empty(n, dtype=np.int64)
    new_of[by_new] = np.arange(n)
    got = renumbered_out_edges(out_edges(n, tails, heads, weights), by_new, new_of)
    expected = out_edges(n, new_of[tails], new_of[heads], weights)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


def test_connection_numbers_are_those_of_the_sorted_connections():
    from collsynth.compiler.scheduling import _connection_ids  # (the dense count, against np.unique's numbers)

    for _, program in library_programs(resolve_topology("dgx1"), "allgather"):
        forms = {}
        compile_program(program, after_each=forms.__setitem__)
        cdag = forms["assign_channels"]
        sends, recvs, count = _connection_ids(cdag)
        dag = cdag.dag
        keys = {}
        for i, ins in enumerate(dag.instrs):
            ch = int(cdag.channels()[i])
            if ins.send_peer >= 0 and ins.kind in ("s", "rcs", "rrs", "rrcs"):
                keys[("s", i)] = (ins.rank, ins.send_peer, ch)
            if ins.recv_peer >= 0:
                keys[("r", i)] = (ins.recv_peer, ins.rank, ch)
        number = {key: k for k, key in enumerate(sorted(set(keys.values())))}
        assert count == len(number)
        for (side, i), key in keys.items():
            assert (sends if side == "s" else recvs)[i] == number[key]
        assert (sends >= 0).sum() + (recvs >= 0).sum() == len(keys)
