"""The instruction DAG's edges as int arrays, and its longest paths computed over them a wavefront at a time
(numpy), instead of one Python step per instr: at 1024 ranks a DAG has millions of instrs but only a few hundred
wavefronts (the most edges on any path), so each numpy call does a wavefront's work at once.

An edge is (tail, head, weight): a same-rank dependency p -> i and a send -> its receive weigh 1, a queue edge
(the previous message of a connection) weighs 0 (see compiler/dag.py, `depths`)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np


def edge_arrays(preds: Sequence[tuple[int, ...]], after: Sequence[tuple[int, ...]],
                send_to: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every edge of the DAG as (tails, heads, weights): the dependencies, then the queue edges, then the
    send -> receive edges (each group in increasing head, then tail, order as the columns hold them)."""
    n = len(send_to)
    return csr_edge_arrays(edge_csr(preds), edge_csr(after), np.fromiter(send_to, dtype=np.int64, count=n))


def edge_csr(edges: Sequence[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-instr edge tuples in CSR form: the count per instr, and all of them one after another."""
    counts = np.fromiter(map(len, edges), dtype=np.int64, count=len(edges))
    return counts, np.fromiter(chain.from_iterable(edges), dtype=np.int64, count=int(counts.sum()))


def csr_edge_arrays(preds: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray],
                    send_to: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`edge_arrays` from the dependencies and the queue edges in CSR form (`edge_csr`) and send_to as an array."""
    n = send_to.size
    (dep_counts, dep_tails), (queue_counts, queue_tails) = preds, after
    sending = np.flatnonzero(send_to >= 0)
    tails = np.concatenate([dep_tails, queue_tails, sending])
    heads = np.concatenate([np.repeat(np.arange(n), dep_counts), np.repeat(np.arange(n), queue_counts),
                            send_to[sending]])
    weights = np.concatenate([np.ones(dep_tails.size, dtype=np.int64), np.zeros(queue_tails.size, dtype=np.int64),
                              np.ones(sending.size, dtype=np.int64)])
    return tails, heads, weights


def out_edges(n: int, tails: np.ndarray, heads: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, ...]:
    """The edges by tail in CSR form (first, heads, weights): the edges out of node v are first[v]:first[v + 1],
    in the order the arrays hold them."""
    by_tail = np.argsort(tails, kind="stable")
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(tails, minlength=n), out=first[1:])
    return first, heads[by_tail], weights[by_tail]


def stable_order(values: np.ndarray, bound: int) -> np.ndarray:
    """np.argsort(values, kind="stable") for ints in 0..bound-1: by numpy's radix sort, on 16-bit copies, where
    they fit in 16 bits (a few times faster for millions of values; the order is the same, a stable one)."""
    return np.argsort(values.astype(np.uint16) if bound <= 1 << 16 else values, kind="stable")


def renumbered_out_edges(csr: tuple[np.ndarray, ...], by_new: np.ndarray, new_of: np.ndarray) -> tuple[np.ndarray, ...]:
    """`out_edges` of the same edges with every node v renumbered new_of[v] (by_new[k] is the node numbered k), from
    their `out_edges`: the edges out of each node, in the same order, gathered instead of sorted again."""
    first, heads, weights = csr
    counts = np.diff(first)[by_new]
    new_first = np.zeros(first.size, dtype=np.int64)
    np.cumsum(counts, out=new_first[1:])
    edges = np.repeat(first[by_new] - new_first[:-1], counts) + np.arange(int(new_first[-1]))
    return new_first, new_of[heads[edges]], weights[edges]


def longest_paths(n: int, tails: np.ndarray, heads: np.ndarray, weights: np.ndarray,
                  csr: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """Per node, the heaviest path that ends there (0 for a node nothing leads to); -1 for a node on a cycle or
    after one. Kahn's algorithm a wavefront at a time: a wavefront is every node whose predecessors are all done.
    `csr`: the edges' `out_edges` when the caller has them."""
    first, out_heads, out_weights = csr or out_edges(n, tails, heads, weights)
    waiting = np.bincount(heads, minlength=n)  # unfinished predecessors (edges) per node
    length = np.zeros(n, dtype=np.int64)
    seen = np.empty(n, dtype=np.int64)  # scratch: a place of each node in the ready list of a wavefront
    front = np.flatnonzero(waiting == 0)
    done = 0
    while front.size:
        done += front.size
        starts = first[front]
        counts = first[front + 1] - starts
        total = int(counts.sum())
        if not total:
            break
        # the out-edges of the wavefront: its nodes' CSR ranges, concatenated
        offsets = np.cumsum(counts) - counts
        edges = np.repeat(starts - offsets, counts) + np.arange(total)
        reached = out_heads[edges]
        np.maximum.at(length, reached, np.repeat(length[front], counts) + out_weights[edges])
        np.subtract.at(waiting, reached, 1)
        ready = reached[waiting[reached] == 0]  # each once per edge from the wavefront: kept once, where it is
        seen[ready] = np.arange(ready.size)  # (whichever of a node's places the store keeps)
        front = ready[seen[ready] == np.arange(ready.size)]
    if done < n:
        length[waiting > 0] = -1
    return length


def dag_depths(preds: Sequence[tuple[int, ...]], after: Sequence[tuple[int, ...]], send_to: Sequence[int],
               backward: bool = True) -> tuple[list[int], list[int]] | None:
    """The depth and reverse depth of every instr (see compiler/dag.py `depths`; reverse depths only when
    `backward`, else an empty list), or None when the edges hold a cycle."""
    n = len(send_to)
    tails, heads, weights = edge_arrays(preds, after, send_to)
    depth = longest_paths(n, tails, heads, weights)
    if n and depth.min() < 0:
        return None
    if not backward:
        return depth.tolist(), []
    return depth.tolist(), longest_paths(n, heads, tails, weights).tolist()
