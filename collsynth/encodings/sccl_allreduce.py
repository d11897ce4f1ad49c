"""AllReduce encoded directly in z3, with combining: which contributions each rank's copy of a chunk holds.

The steps, rounds and capacities are the SCCL encoding's (`sccl_z3.StepEncoding`); this module adds the
copy/reduce sends and the contribution sets (see `AllReduceEncoding`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import z3

from collsynth.core.enums import Op
from collsynth.encodings.sccl_z3 import EncodingError, SendKey, StepEncoding
from collsynth.topologies.symmetry import orbits

# --- constraint families (one function each) ----------------------------------------------------

HasFn = Callable[[int, int, int, int], z3.BoolRef]


def _not(x: z3.BoolRef) -> z3.BoolRef:
    # z3.Not(x) without z3's argument coercion: the same term, built faster (AllReduce builds make ~10^5)
    return z3.BoolRef(z3.Z3_mk_not(x.ctx.ref(), x.as_ast()), x.ctx)


def _or(*args: z3.BoolRef) -> z3.BoolRef:
    # z3.Or(*args) of Boolean terms without z3's argument coercion: the same term, built faster
    array = (z3.Ast * len(args))(*[x.as_ast() for x in args])
    return z3.BoolRef(z3.Z3_mk_or(args[0].ctx.ref(), len(args), array), args[0].ctx)


def _and(*args: z3.BoolRef) -> z3.BoolRef:
    # z3.And(*args) of Boolean terms without z3's argument coercion: the same term, built faster
    array = (z3.Ast * len(args))(*[x.as_ast() for x in args])
    return z3.BoolRef(z3.Z3_mk_and(args[0].ctx.ref(), len(args), array), args[0].ctx)


def copy_or_reduce(cp: dict[SendKey, z3.BoolRef], rd: dict[SendKey, z3.BoolRef],
                   keys: Sequence[SendKey]) -> list[z3.BoolRef]:
    # not (cp[c,u,v,t] and rd[c,u,v,t]): a send is a copy or a reduction
    return [_or(_not(cp[k]), _not(rd[k])) for k in keys]


def single_copy_in(cp: dict[SendKey, z3.BoolRef], rd: dict[SendKey, z3.BoolRef], senders: Mapping[int, Sequence[int]],
                   pairs: Sequence[tuple[int, int, int]]) -> list[z3.BoolRef]:
    # sum_u cp[c,u,v,t] <= 1 and cp[c,u,v,t] -> not rd[c,w,v,t] for all w
    constraints = []
    for c, v, t in pairs:
        copies = [cp[(c, u, v, t)] for u in senders[v]]
        if len(copies) > 1:
            constraints.append(z3.AtMost(*copies, 1))
        no_reduction = [_not(rd[(c, w, v, t)]) for w in senders[v]]
        for u in senders[v]:
            no_copy = _not(cp[(c, u, v, t)])
            constraints += [_or(no_copy, x) for x in no_reduction]
    return constraints


def no_double_count(rd: dict[SendKey, z3.BoolRef], has: HasFn, senders: Mapping[int, Sequence[int]],
                    pairs: Sequence[tuple[int, int, int]], ranks: int) -> list[z3.BoolRef]:
    # rd[c,u,v,t] -> not (has[c,u,t,j] and has[c,v,t,j])
    # rd[c,u,v,t] and rd[c,w,v,t] -> not (has[c,u,t,j] and has[c,w,t,j])
    clauses = []
    for c, v, t in pairs:
        no_rd = {u: _not(rd[(c, u, v, t)]) for u in senders[v]}
        lacks = {(u, j): _not(has(c, u, t, j)) for u in (v, *senders[v]) for j in range(ranks)}
        for i, u in enumerate(senders[v]):
            for j in range(ranks):
                clauses.append(_or(no_rd[u], lacks[(u, j)], lacks[(v, j)]))
                clauses += [_or(no_rd[u], no_rd[w], lacks[(u, j)], lacks[(w, j)]) for w in senders[v][i + 1:]]
    return clauses


def contributions_flow(cp: dict[SendKey, z3.BoolRef], rd: dict[SendKey, z3.BoolRef], has: HasFn,
                       senders: Mapping[int, Sequence[int]],
                       keys: Sequence[tuple[int, int, int, int]]) -> list[z3.BoolRef]:
    # has[c,v,t+1,j] = (has[c,v,t,j] and no copy into v) or OR_u ((cp or rd)[c,u,v,t] and has[c,u,t,j])
    constraints = []
    not_copied: dict[tuple[int, int, int], z3.BoolRef] = {}  # the same terms for every j: built once
    sent: dict[SendKey, z3.BoolRef] = {}
    for c, v, step, j in keys:
        t = step - 1
        if (c, v, t) not in not_copied:
            copies = [cp[(c, u, v, t)] for u in senders[v]]
            copied = _or(*copies) if copies else z3.BoolVal(False, has(c, v, step, j).ctx)
            not_copied[(c, v, t)] = _not(copied)
            sent.update({(c, u, v, t): _or(cp[(c, u, v, t)], rd[(c, u, v, t)]) for u in senders[v]})
        arriving = [_and(sent[(c, u, v, t)], has(c, u, t, j)) for u in senders[v]]
        constraints.append(has(c, v, step, j) == _or(_and(has(c, v, t, j), not_copied[(c, v, t)]), *arriving))
    return constraints


def allreduce_postcondition(has: HasFn, num_chunks: int, ranks: int, steps: int) -> list[z3.BoolRef]:
    # has[c,r,S,j] for every chunk, rank and contribution
    return [has(c, r, steps, j) for c in range(num_chunks) for r in range(ranks) for j in range(ranks)]


class AllReduceEncoding(StepEncoding):
    """AllReduce encoded directly, with combining: which contributions each rank's copy of a chunk holds.

    Variables: `cp[c,u,v,t]` / `rd[c,u,v,t]`: u copies / reduces its value of chunk c into v in step t;
    `has[c,r,t,j]`: after step t, rank r's value of chunk c includes rank j's contribution. A step reads the
    values at its start; a rank takes at most one copy per step and never mixes copies and reductions
    into one chunk in one step (verify() allows identical copies, which are never needed). No
    contribution may be added twice."""

    def _build(self) -> None:
        n, steps = self.topology.num_ranks, self.steps
        if self.collective.name != "allreduce":
            raise EncodingError(f"AllReduceEncoding encodes AllReduce, not {self.collective.name}")
        far = max(self.topology.distances[a][b] for a in range(n) for b in range(n))
        if far > steps:
            self.infeasible_reason = (f"contributions need {far} steps to cross {self.topology.name}"
                                      if far != float("inf") else f"{self.topology.name} is not connected")
            return
        chunks = range(self.collective.num_chunks)
        links = [(x.src, x.dst) for x in self.topology.link_list]
        send_keys = [(c, u, v, t) for c in chunks for t in range(steps) for u, v in links]
        has_keys = [(c, r, t, j) for c in chunks for t in range(1, steps + 1) for r in range(n) for j in range(n)]
        rep_send = orbits(send_keys, self._moves_on(lambda g, k: (g[1][k[0]], g[0][k[1]], g[0][k[2]], k[3])))
        rep_has = orbits(has_keys, self._moves_on(lambda g, k: (g[1][k[0]], g[0][k[1]], k[2], g[0][k[3]])))
        cp_var = {k: z3.Bool("cp_{}_{}_{}_{}".format(*k), self.context) for k in send_keys if rep_send[k] == k}
        rd_var = {k: z3.Bool("rd_{}_{}_{}_{}".format(*k), self.context) for k in send_keys if rep_send[k] == k}
        has_var = {k: z3.Bool("has_{}_{}_{}_{}".format(*k), self.context) for k in has_keys if rep_has[k] == k}
        self.cp = {k: cp_var[rep_send[k]] for k in send_keys}
        self.rd = {k: rd_var[rep_send[k]] for k in send_keys}

        def has(c: int, r: int, t: int, j: int) -> z3.BoolRef:
            return z3.BoolVal(r == j, self.context) if t == 0 else has_var[rep_has[(c, r, t, j)]]

        for (c, u, v, t) in send_keys:
            self.link_sends[(u, v, t)] += [self.cp[(c, u, v, t)], self.rd[(c, u, v, t)]]
            self.decoded[(c, u, v, t, Op.COPY)] = self.cp[(c, u, v, t)]
            self.decoded[(c, u, v, t, Op.REDUCE)] = self.rd[(c, u, v, t)]
        own_sends = [k for k in send_keys if rep_send[k] == k]
        own_pairs = sorted({(c, v, t) for c, _, v, t in own_sends})
        senders = {v: self.topology.in_neighbors[v] for v in range(n)}
        add = self.solver.add
        add(*copy_or_reduce(self.cp, self.rd, own_sends))
        add(*single_copy_in(self.cp, self.rd, senders, own_pairs))
        add(*no_double_count(self.rd, has, senders, own_pairs, n))
        add(*contributions_flow(self.cp, self.rd, has, senders, [k for k in has_keys if rep_has[k] == k]))
        add(*allreduce_postcondition(has, self.collective.num_chunks, n, steps))
