"""The instruction DAG and the pass that builds it, trace_to_dag (the passes that rewrite it:
compiler/ordering.py order_messages, compiler/merging.py aggregate_contiguous and fuse_instructions).

An `Instr` is one MSCCL-IR step before placement: a send, a receive (r / rrc), a local copy or reduce
(cpy / re), or a fused step (rcs / rrs / rrcs). Its slots are always on its own rank: `src` is what it
reads locally, `dst` what it writes locally (for a send both are the slot sent; for r/rcs both are
the slot written; for rrc/rrs/rrcs both are the receiver's own slot, the local operand). A sending
instr is matched (`send_to`) to the receiving instr on its peer.

Every instr is one record that also holds its edges, as numbers of other instrs of its DAG.
`Instr.preds` holds the same-rank dependencies found while tracing: read-after-write,
write-after-read and write-after-write on each slot (a write waits for the readers since the last
write, or for that write if nobody read it). `Instr.after` holds the per-connection order: every
message between two ranks follows the previous one, on the sending side and on the receiving side
alike, so the FIFO connections see the same order at both ends. `trace_to_dag` queues messages in
program order (always feasible: every dependency of the trace points forward in program order);
`order_messages` then re-queues them in the order of a critical-path priority schedule, so that a
program written chunk by chunk still pipelines. These ordering edges are for scheduling only; they
never become waits in the IR.

Depth counts dependencies and send->receive edges as 1 and ordering edges as 0. Invariant kept by
every pass: instrs are numbered in a topological order of all three kinds of edges (after tracing,
by program position), so depths are one pass; a merge of instrs is safe when every edge between
groups still goes up in (depth, position). A pass that renumbers or merges instrs names the new order (and
the groups) as a `Renumbering`; `InstrDAG.renumbered` remaps every instr's edges through it, so no pass
remaps preds / after / send_to itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, repeat
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from collsynth.compiler.errors import CompileError
from collsynth.compiler.paths import csr_edge_arrays, dag_depths, edge_csr
from collsynth.compiler.tracing import trace_columns
from collsynth.ir import (
    COPY,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
)
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.language.program import COPY as OP_COPY
from collsynth.language.program import Program, alias_slot, initial_slots, validate_program, where

FUSED_TYPES = frozenset({RECV_COPY_SEND, RECV_REDUCE_SEND, RECV_REDUCE_COPY_SEND})


class Instr(NamedTuple):
    kind: str  # an MSCCL-IR step type
    rank: int
    src_buf: str
    src_off: int
    dst_buf: str
    dst_off: int
    cnt: int
    send_peer: int = -1
    recv_peer: int = -1
    tb_hint: int = -1  # -1: automatic
    ch_hint: int = -1
    line: int = 0
    # Its edges, in its DAG's numbering (set by trace_to_dag, remapped only by InstrDAG.renumbered):
    preds: tuple[int, ...] = ()  # same-rank dependencies, each < its instr
    after: tuple[int, ...] = ()  # the previous message(s) of the instr's connection(s), each < it
    send_to: int = -1  # the matched receiving instr of a sending instr, else -1

    def __str__(self) -> str:
        span = "" if self.cnt == 1 else f"x{self.cnt}"
        if self.kind in (COPY, REDUCE):
            body = f"{self.src_buf}[{self.src_off}]{span} -> {self.dst_buf}[{self.dst_off}]"
        else:
            body = f"{self.dst_buf}[{self.dst_off}]{span}"
        peers = (f" <-r{self.recv_peer}" if self.recv_peer >= 0 else "") + (
            f" ->r{self.send_peer}" if self.send_peer >= 0 else "")
        hints = (f" tb={self.tb_hint}" if self.tb_hint >= 0 else "") + (
            f" ch={self.ch_hint}" if self.ch_hint >= 0 else "")
        line = f"  # line {self.line}" if self.line else ""
        return f"r{self.rank} {self.kind:<4} {body}{peers}{hints}{line}"


# An Instr from all 15 fields in order, without NamedTuple.__new__'s argument handling (half the cost; the
# tracing makes millions of them).
instr_of_fields = partial(tuple.__new__, Instr)
STEP_FIELDS = 12  # Instr's fields before its edges: ins[:STEP_FIELDS] is the step itself


def column(instrs: Sequence[Instr], name: str) -> list[Any]:
    """One field of every instr, as a list (for the passes' inner loops: a list index is cheaper than a field
    lookup)."""
    return list(map(attrgetter(name), instrs))


@dataclass(frozen=True, slots=True)
class InstrDAG:
    num_ranks: int
    instrs: tuple[Instr, ...]  # numbered in a topological order of all their edges
    source: str = ""  # DSL file, for messages
    # Fields of every instr as columns, each made once (several passes read the same DAG); not part of the value
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.instrs)

    def column(self, name: str) -> list[Any]:
        """One field of every instr as a list (made on the first call; do not change it)."""
        got = self.cache.get(name)
        if got is None:
            got = self.cache[name] = column(self.instrs, name)
        return got

    def is_kind(self, kinds: frozenset[str] | set[str]) -> np.ndarray:
        """Per instr, whether its kind is one of `kinds` (a bool array; the kinds as numbers are made once)."""
        got = self.cache.get("kind codes")
        if got is None:
            names = self.column("kind")
            number = {kind: k for k, kind in enumerate(sorted(set(names)))}
            codes = np.fromiter(map(number.__getitem__, names), dtype=np.int64, count=len(names))
            got = self.cache["kind codes"] = (codes, number)
        codes, number = got
        return np.isin(codes, [k for kind, k in number.items() if kind in kinds])

    def values(self, name: str) -> np.ndarray:
        """One integer field of every instr as a read-only array (made on the first call)."""
        key = "array " + name
        got = self.cache.get(key)
        if got is None:
            source = self.cache.get(name)
            got = (np.array(source, dtype=np.int64) if source is not None else
                   np.fromiter(map(attrgetter(name), self.instrs), dtype=np.int64, count=len(self.instrs)))
            got.flags.writeable = False
            self.cache[key] = got
        return got

    def edge_csr(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The "preds" or "after" edges of every instr in CSR form (paths.edge_csr; made on the first call)."""
        key = name + " csr"
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = edge_csr(self.column(name))
        return got

    def edge_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All edges as (tails, heads, weights), as paths.edge_arrays gives them."""
        return csr_edge_arrays(self.edge_csr("preds"), self.edge_csr("after"), self.values("send_to"))

    def recv_from(self) -> list[int]:
        """The matched sending instr of each receiving instr, else -1."""
        sender = [-1] * len(self.instrs)
        for i, j in enumerate(column(self.instrs, "send_to")):
            if j >= 0:
                sender[j] = i
        return sender

    def succs(self) -> list[list[int]]:
        """The instrs that depend on each instr (same-rank dependencies), in increasing order."""
        first, targets = dependents(self)
        return [targets[first[i]:first[i + 1]] for i in range(len(self.instrs))]

    def where(self, i: int) -> str:
        return where(self.instrs[i].line, self.source)

    def renumbered(self, numbering: Renumbering, instrs: Sequence[Instr],
                   after: Sequence[tuple[int, ...]] | None = None) -> InstrDAG:
        """The DAG of the new `instrs` (one per new number; their own edges are ignored): every old instr's
        edges renumbered through `numbering`; `after`: new queues, given in new numbers, instead of the old ones
        renumbered."""
        old = self.instrs
        preds = numbering.edges(column(old, "preds"))
        queued = numbering.edges(column(old, "after")) if after is None else after
        send_to = numbering.targets(column(old, "send_to"))
        made = [instr_of_fields((*ins[:STEP_FIELDS], p, a, t))
                for ins, p, a, t in zip(instrs, preds, queued, send_to, strict=True)]
        return InstrDAG(self.num_ranks, tuple(made), self.source)

    def __str__(self) -> str:
        lines = [f"instruction DAG: {len(self.instrs)} instrs on {self.num_ranks} ranks"]
        for i, ins in enumerate(self.instrs):
            after = f"  after {','.join(map(str, ins.preds))}" if ins.preds else ""
            order = f"  queued after {','.join(map(str, ins.after))}" if ins.after else ""
            to = f"  => {ins.send_to}" if ins.send_to >= 0 else ""
            lines.append(f"  {i}: {ins}{after}{order}{to}")
        return "\n".join(lines)


class Renumbering:
    """Old instr numbers -> new ones, when the instrs take a new order and groups of them merge into one: the
    new instr k stands for old `units[k]` and, if `units[k]` leads a group, for all of the group's members.
    The one place where the DAG's index columns (preds, after, send_to) are remapped."""

    __slots__ = ("units", "groups", "new")

    def __init__(self, n: int, units: Sequence[int], groups: dict[int, Sequence[int]] | None = None) -> None:
        self.units = units
        self.groups = groups or {}
        new = [0] * n
        for k, u in enumerate(units):
            new[u] = k
        for first, group in self.groups.items():
            for m in group:
                new[m] = new[first]
        self.new = new  # the new number of every old instr (its group's)

    def edges(self, old: Sequence[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
        """Per new instr: its old instrs' edges in new numbers, sorted, without duplicates or itself."""
        new, groups = self.new, self.groups
        out: list[tuple[int, ...]] = []
        for k, u in enumerate(self.units):
            group = groups.get(u) if groups else None
            if group is None:  # a single instr: only renumber
                ps = old[u]
                if not ps:
                    out.append(())
                elif len(ps) == 1:
                    out.append((new[ps[0]],))
                else:
                    out.append(tuple(sorted({new[p] for p in ps})))
            else:
                merged = {new[p] for m in group for p in old[m]}
                merged.discard(k)
                out.append(tuple(sorted(merged)))
        return tuple(out)

    def targets(self, old: Sequence[int]) -> tuple[int, ...]:
        """Per new instr: the new number of its old instrs' target outside itself (send_to), else -1."""
        new, groups = self.new, self.groups
        out: list[int] = []
        for k, u in enumerate(self.units):
            group = groups.get(u) if groups else None
            if group is None:
                j = old[u]
                out.append(new[j] if j >= 0 else -1)
            else:
                to = -1
                for m in group:
                    j = old[m]
                    if j >= 0 and new[j] != k:
                        to = new[j]
                out.append(to)
        return tuple(out)


def dependents(dag: InstrDAG) -> tuple[list[int], list[int]]:
    """The same-rank dependents of every instr in CSR form: those of instr i are targets[first[i]:first[i + 1]],
    in increasing order."""
    n = len(dag.instrs)
    preds = column(dag.instrs, "preds")
    heads = np.fromiter(chain.from_iterable(preds), dtype=np.int64)
    tails = np.repeat(np.arange(n), np.fromiter(map(len, preds), dtype=np.int64, count=n))
    by_head = np.argsort(heads, kind="stable")  # tails are increasing: each instr's dependents stay sorted
    first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(heads, minlength=n), out=first[1:])
    return first.tolist(), tails[by_head].tolist()


Edges = tuple[list[tuple[int, ...]], Sequence[tuple[int, ...]], list[int]]  # preds, after, send_to of every instr


def edge_columns(dag: InstrDAG, queued: bool = True) -> Edges:
    """Every instr's preds, after (empty for all when not `queued`) and send_to, for the passes' inner loops."""
    after = dag.column("after") if queued else ((),) * len(dag.instrs)
    return dag.column("preds"), after, dag.column("send_to")


def depths(dag: InstrDAG, queued: bool = True, edges: Edges | None = None) -> tuple[list[int], list[int]]:
    """Longest path from a start (depth) and to an end (reverse depth) of every instr: dependencies and
    send -> receive edges count 1, ordering edges 0 (`queued=False`: ordering edges are left out, the
    pure critical path of the data). One forward and one backward pass. `edges`: the DAG's `edge_columns`
    when the caller has them."""
    preds, after, send_to = edges or edge_columns(dag, queued)
    found = dag_depths(preds, after, send_to)
    if found is not None:
        return found
    n = len(preds)  # a cycle (a broken DAG): the one-pass loops below, whose numbers the error messages show
    rdepth = [0] * n
    # (one zip walked backwards instead of three lists indexed per instr)
    for i, ps, qs, j in zip(range(n - 1, -1, -1), reversed(preds), reversed(after), reversed(send_to), strict=True):
        r = rdepth[i]
        if j >= 0 and rdepth[j] >= r:
            r = rdepth[j] + 1
            rdepth[i] = r
        r1 = r + 1
        for p in ps:
            if rdepth[p] < r1:
                rdepth[p] = r1
        for p in qs:
            if rdepth[p] < r:
                rdepth[p] = r
    return forward_depths(dag, queued, (preds, after, send_to)), rdepth


def forward_depths(dag: InstrDAG, queued: bool = True, edges: Edges | None = None) -> list[int]:
    """The depth half of `depths`."""
    preds, after, send_to = edges or edge_columns(dag, queued)
    found = dag_depths(preds, after, send_to, backward=False)
    if found is not None:
        return found[0]
    n = len(preds)
    depth = [0] * n
    for i, ps, qs, j in zip(range(n), preds, after, send_to, strict=True):  # (not three lists indexed per instr)
        d = depth[i]
        for p in ps:
            if depth[p] >= d:
                d = depth[p] + 1
        for p in qs:
            if depth[p] > d:
                d = depth[p]
        depth[i] = d
        if j >= 0 and depth[j] <= d:
            depth[j] = d + 1
    return depth


# --- trace_to_dag --------------------------------------------------------------------------------

def trace_to_dag(program: Program) -> InstrDAG:
    """Program -> instruction DAG: each op becomes a send + receive (or a local cpy/re) with its
    read-after-write, write-after-read and write-after-write dependencies, and each message queues
    behind the previous message between the same two ranks."""
    coll = program.collective
    source = program.ops[0].file if program.ops else ""
    manual = program.options.threadblock_policy == "manual"  # auto placement ignores sendtb/recvtb
    # Every slot of every buffer gets an integer id: (rank, buffer) -> first id.
    base: dict[tuple[int, str], int] = {}
    sizes: dict[tuple[int, str], int] = {}
    total = 0
    for rank in range(program.num_ranks):
        named = [(INPUT, coll.input_chunks), (OUTPUT, coll.output_chunks), *program.scratch_sizes(rank).items()]
        for name, size in named:
            base[(rank, name)] = total
            sizes[(rank, name)] = size
            total += size
    unwritten, initial = -2, -1
    last_writer = [unwritten] * total
    for rank, buf, index in initial_slots(coll):
        last_writer[base[(rank, buf)] + index] = initial
    traced = trace_columns(program, base, sizes, np.asarray(last_writer, dtype=np.int64) == initial, manual)
    if traced is not None:  # (the usual lowered program: every op copies one chunk) the same DAG, by arrays
        records = tuple(map(tuple.__new__, repeat(Instr, len(traced.fields[0])), zip(*traced.fields, strict=True)))
        return InstrDAG(program.num_ranks, records, source, traced.arrays)
    validate_program(program)  # (trace_columns checked what it traced: the loop's programs are checked here)
    readers: list[list[int] | None] = [None] * total
    ranks = program.num_ranks
    last_message: dict[int, int] = {}  # sender * ranks + receiver -> index of the last send
    instrs: list[Instr] = []

    def read(i: int, first: int, cnt: int, deps: set[int], rank: int, buf: str, off: int, line: int) -> None:
        for slot in range(first, first + cnt):
            w = last_writer[slot]
            if w >= 0:
                deps.add(w)
            elif w == unwritten:
                raise CompileError(f"{where(line, source)}reads rank {rank} {buf}[{off + slot - first}], which nobody "
                                   "wrote; copy data there first")
            rs = readers[slot]
            if rs is None:
                readers[slot] = [i]
            else:
                rs.append(i)

    def write(i: int, first: int, cnt: int, deps: set[int]) -> None:
        for slot in range(first, first + cnt):
            rs = readers[slot]
            if rs:
                deps.update(rs)  # write-after-read; the readers already follow the last write
                readers[slot] = None
            elif last_writer[slot] >= 0:
                deps.add(last_writer[slot])  # write-after-write
            last_writer[slot] = i

    inplace = coll.inplace  # out of place, alias_slot is the identity

    def ordered(deps: set[int]) -> tuple[int, ...]:
        return tuple(deps) if len(deps) < 2 else tuple(sorted(deps))

    for op in program.ops:
        src, dst, line = op.src, op.dst, op.line
        cnt = src.count
        if inplace:
            sbuf, soff = alias_slot(coll, src.rank, src.buffer, src.index)
            dbuf, doff = alias_slot(coll, dst.rank, dst.buffer, dst.index)
        else:
            sbuf, soff, dbuf, doff = src.buffer, src.index, dst.buffer, dst.index
        sfirst, dfirst = base[(src.rank, sbuf)] + soff, base[(dst.rank, dbuf)] + doff
        channel = -1 if op.channel is None else op.channel
        copying = op.op == OP_COPY
        i = len(instrs)
        if src.rank == dst.rank:
            if copying and sfirst == dfirst:
                continue
            deps: set[int] = set()
            read(i, sfirst, cnt, deps, src.rank, sbuf, soff, line)
            if not copying:
                read(i, dfirst, cnt, deps, dst.rank, dbuf, doff, line)
            write(i, dfirst, cnt, deps)
            deps.discard(i)
            instrs.append(instr_of_fields((COPY if copying else REDUCE, src.rank, sbuf, soff, dbuf, doff, cnt, -1, -1,
                                           -1 if op.sendtb is None or not manual else op.sendtb, channel, line,
                                           ordered(deps), (), -1)))
            continue
        connection = src.rank * ranks + dst.rank
        previous = last_message.get(connection)
        last_message[connection] = i
        j = i + 1
        if cnt == 1 and copying:  # the common case, without sets: copied_once, inline
            w = last_writer[sfirst]
            if w == unwritten:
                read(i, sfirst, 1, set(), src.rank, sbuf, soff, line)  # raises
            send_deps: tuple[int, ...] = (w,) if w >= 0 else ()
            rs = readers[sfirst]
            if rs is None:
                readers[sfirst] = [i]
            else:
                rs.append(i)
            rs = readers[dfirst]
            if rs:
                readers[dfirst] = None
                recv_preds = tuple(rs) if len(rs) < 2 else tuple(sorted(set(rs)))
            else:
                w = last_writer[dfirst]
                recv_preds = (w,) if w >= 0 else ()
            last_writer[dfirst] = j
        else:
            deps = set()
            read(i, sfirst, cnt, deps, src.rank, sbuf, soff, line)
            send_deps = ordered(deps)
            deps = set()
            if not copying:
                read(j, dfirst, cnt, deps, dst.rank, dbuf, doff, line)
            write(j, dfirst, cnt, deps)
            deps.discard(j)
            recv_preds = ordered(deps)
        instrs.append(instr_of_fields((SEND, src.rank, sbuf, soff, sbuf, soff, cnt, dst.rank, -1,
                                       -1 if op.sendtb is None or not manual else op.sendtb, channel, line,
                                       send_deps, () if previous is None else (previous,), j)))
        instrs.append(instr_of_fields((RECV if copying else RECV_REDUCE_COPY, dst.rank, dbuf, doff, dbuf, doff, cnt, -1,
                                       src.rank, -1 if op.recvtb is None or not manual else op.recvtb, channel, line,
                                       recv_preds, () if previous is None else (previous + 1,), -1)))
    return InstrDAG(program.num_ranks, tuple(instrs), source)


# --- order_messages ------------------------------------------------------------------------------


def transfer_chain(instrs: Sequence[Instr], head: int) -> list[int]:
    """The instrs one chunk's transfer passes through from the send `head`: the fused steps that forward it,
    then the final receive."""
    chain = [head]
    j = instrs[head].send_to
    while instrs[j].kind in FUSED_TYPES:
        chain.append(j)
        j = instrs[j].send_to
    chain.append(j)
    return chain
