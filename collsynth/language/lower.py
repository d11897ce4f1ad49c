"""Lowering a synthesized `Algorithm` (SMT or MILP) to a DSL `Program` (DESIGN.md, "Program").

Where a chunk lives on a rank:
- its *start* slot: the input slot, on ranks that hold (or contribute to) it at the start;
- its *home* slot: the output slot on ranks that must hold it at the end (the postcondition); a scratch
  slot on ranks that only relay it (or, for combining collectives, accumulate a partial sum they pass on).
A send `c: s -> d` reads the chunk where `s` has it now and writes `d`'s home slot:
- copy:   home(c, d) := current(c, s)
- reduce: home(c, d) += current(c, s); the receiver's own slot is the local operand. When `d` still holds
  its contribution only in its input slot, that is copied to its home slot first (out-of-place), so the
  input buffer is never written.
Sends of one step read the state at the start of the step: within a step, an op that reads a slot is
emitted before an op that writes it; where two ops would each overwrite the other's source (a swap), one
source is staged in scratch first. At the end, a rank that must hold a chunk it had from the start (e.g.
its own AllGather chunk) copies it from input to output.

One message per step and link (the model's cost: one alpha per step and link): the sends of a step on
one link are emitted in the order of their slots, so that the compiler's `aggregate_contiguous` merges
those that are contiguous at both ends into one transfer. `merge="stage"` makes every such group one
message: sources that are not contiguous are gathered into a fresh scratch block first (local copies),
and the block lands in a fresh scratch block on the receiver (or straight in its home slots when those
are contiguous and nothing else in the step reads them); the receiver keeps the chunks there (later
steps forward them from the block) and copies them to their output slots at the end. Reductions are
staged the same way: the block is received into scratch and reduced into the home slots locally.
Staging trades alphas for local copies: cheaper at small sizes on high-latency links, the tuner picks.

Programs are built with the DSL's `ProgramBuilder`, so the symbolic checks of the DSL (stale references,
reads of unwritten slots, the postcondition) apply to lowered programs too.
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace

from collsynth.collectives import STANDARD, make_collective
from collsynth.core.collector import paused_collector
from collsynth.language.builder import NO_HINTS, ProgramBuilder, caller_location
from collsynth.language.program import COPY, Program, ProgramError, Slot, alias_slot, unit_slot
from collsynth.language.program import REDUCE as ADD
from collsynth.schedule.algorithm import REDUCE, Algorithm, Send
from collsynth.topologies import TopologyError, resolve_topology

INPUT, OUTPUT, SCRATCH = "input", "output", "scratch"
Place = tuple[str, int]  # (buffer, index) on a known rank


class LoweringError(ProgramError):
    """An algorithm that cannot be expressed as a DSL program (the message names the send)."""


MERGE_MODES = ("contiguous", "stage")


def lower_to_program(algorithm: Algorithm, *, instances: int = 1, protocol: str = "Simple", name: str | None = None,
                     inplace: bool | None = None, merge: str = "contiguous") -> Program:
    """A DSL program that moves (and reduces) chunks exactly as `algorithm` does; `merge` says how the
    sends of one step on one link become one message (see the module docstring)."""
    return _lower(algorithm, None, instances=instances, protocol=protocol, name=name, inplace=inplace, merge=merge)


Placement = Callable[[int, int], tuple[int | None, int | None, int | None]]


def lower_placed(algorithm: Algorithm, place: Placement, *, protocol: str = "Simple",
                 name: str | None = None) -> Program:
    """`lower_to_program`, each op given the hints (sendtb, recvtb, channel) that `place(src rank, dst rank)`
    returns, called once per op in program order (language/timed.py)."""
    return _lower(algorithm, place, protocol=protocol, name=name)


def _lower(algorithm: Algorithm, place: Placement | None, *, instances: int = 1, protocol: str = "Simple",
           name: str | None = None, inplace: bool | None = None, merge: str = "contiguous") -> Program:
    if merge not in MERGE_MODES:
        raise LoweringError(f"merge must be one of {', '.join(MERGE_MODES)}, got {merge!r}")
    coll = algorithm.collective if inplace is None else algorithm.collective.with_inplace(inplace)
    builder = ProgramBuilder(name or algorithm.name, algorithm.topology, coll, instances=instances,
                             protocol=protocol)
    line, file = caller_location()  # every op's DSL location: the line that asked for the lowering
    # Ops, slots and symbolic contents are many small acyclic objects (a million ops at 1024 ranks): the cyclic
    # collector would scan them over and over as they pile up and free nothing.
    with paused_collector():
        _Lowering(builder, algorithm, coll, stage=merge == "stage", at=(line, file), place=place).run()
        problems = builder.check()
    if problems:
        raise LoweringError(f"lowered program {builder.name!r} fails its postcondition: {problems[0]}")
    program = builder.build()
    if any(send.start_us is not None for step in algorithm.steps for send in step.sends):
        # A timed (MILP) schedule queues a link's messages in start order: a later message holding lower slots
        # was timed later, and merging it in front makes the earlier chunk wait for it (relays lose their
        # pipelining at large sizes). Runs grow upwards only, as before; the tuner may still ask for both.
        program = replace(program, options=replace(program.options, aggregate_either_end=False))
    return program


class _Lowering:
    def __init__(self, builder: ProgramBuilder, algorithm: Algorithm, coll, stage: bool = False,
                 at: tuple[int, str] = (0, ""), place: Placement | None = None) -> None:
        self.builder, self.algorithm, self.coll, self.stage, self.place = builder, algorithm, coll, stage, place
        self.line, self.file = at
        # The state per (chunk, rank) lives in flat lists at chunk * num_ranks + rank: a million pairs at 1024 ranks,
        # read several times per send, where a list index costs far less than a look-up of a tuple key.
        self.n = n = coll.num_ranks
        self.num_chunks = coll.num_chunks
        self.current: list[Place | None] = [None] * (coll.num_chunks * n)  # where the rank holds the chunk now
        self.scratch: dict[int, Place] = {}  # the chunk's scratch home on the rank
        self.scratch_used: defaultdict[int, int] = defaultdict(int)
        # The output index on the ranks that must hold the chunk at the end (its postcondition), else None: home()
        # runs per send, and one look-up answers both "must it?" and "where?".
        self._outputs: list[int | None] = [None] * (coll.num_chunks * n)
        for c, r, i in coll.outputs:
            self._outputs[c * n + r] = i
        # Out of place, an output home is one of these tuples: shared, not one new tuple per send.
        size = max(coll.output_chunks, 1 + max((i for *_, i in coll.outputs), default=-1))
        self._output_places = [(OUTPUT, i) for i in range(size)]
        for c, r, i in coll.inputs:
            self.current[c * n + r] = self._alias(r, INPUT, i)

    def _alias(self, rank: int, buffer: str, index: int) -> Place:
        if not self.coll.inplace:
            return buffer, index
        return alias_slot(self.coll, rank, buffer, index)

    def _new_scratch(self, rank: int) -> Place:
        index = self.scratch_used[rank]
        self.scratch_used[rank] += 1
        return (SCRATCH, index)

    def home(self, chunk: int, rank: int) -> Place:
        key = chunk * self.n + rank
        index = self._outputs[key]
        if index is not None:
            return self._alias(rank, OUTPUT, index) if self.coll.inplace else self._output_places[index]
        held = self.current[key]
        if not self.coll.combining and held is not None:
            return held  # a non-combining chunk never changes: keep it where it is
        if key not in self.scratch:
            self.scratch[key] = self._new_scratch(rank)
        return self.scratch[key]

    def run(self) -> None:
        for t, step in enumerate(self.algorithm.steps):
            self._lower_step(t, self._checked(t, step.sends))
        # Every (chunk, rank) of the postcondition, in (chunk, rank) order: it must hold the chunk, in its home
        # slot. One pass over the outputs finds the few that do not already (a rank's own chunk of an AllGather);
        # only those are looked at again, in order (a copy changes only its own pair).
        current, n, pending = self.current, self.n, []
        homes = self._output_places if not self.coll.inplace else None
        for c, r, i in self.coll.outputs:
            where = current[c * n + r]
            if where is None or where != (homes[i] if homes is not None else self._alias(r, OUTPUT, i)):
                pending.append((c, r))
        for c, r in sorted(set(pending)):
            where, home = current[c * n + r], self.home(c, r)
            if where is None:
                raise LoweringError(f"{self.algorithm.name}: rank {r} never receives chunk {c}")
            if where != home:
                self._copy(r, where, r, home)
                current[c * n + r] = home

    def _checked(self, t: int, sends: tuple[Send, ...]) -> list[Send]:
        """The step's sends, less the copies of a non-combining chunk to a rank that already has it (they change
        nothing); every chunk and rank must exist (the flat state would read another pair's entry)."""
        n, chunks, current, combining = self.n, self.num_chunks, self.current, self.coll.combining
        seen: set[int] = set()
        kept = []
        for send in sends:
            chunk, src, dst = send.chunk, send.src, send.dst
            if not (0 <= chunk < chunks and 0 <= src < n and 0 <= dst < n):
                raise LoweringError(f"{self.algorithm.name}: step {t}: send {send} names a chunk or rank outside "
                                    f"the collective's {chunks} chunks and {n} ranks")
            if combining:
                continue
            key = chunk * n + dst
            if key in seen or current[key] is not None:
                continue
            seen.add(key)
            kept.append(send)
        return list(sends) if combining else kept

    def _lower_step(self, t: int, sends: list[Send]) -> None:
        # Plan every op against the state at the start of the step. (The home of a chunk on a rank that must
        # hold it, out of place, is inlined: this loop runs once per send, a million times at 1024 ranks.)
        planned = []
        current, home, outputs, places, n = self.current, self.home, self._outputs, self._output_places, self.n
        out_of_place = not self.coll.inplace
        for send in sends:
            chunk = send.chunk
            base = chunk * n
            src = current[base + send.src]
            if src is None:
                raise LoweringError(f"{self.algorithm.name}: step {t}: rank {send.src} sends chunk {chunk} "
                                    "before holding it")
            index = outputs[base + send.dst] if out_of_place else None
            planned.append((send, src, places[index] if index is not None else home(chunk, send.dst)))
        if self.stage:
            planned = self._stage_groups(t, planned)
        # A link's sends in slot order, so contiguous ones are adjacent (one message); timed (MILP) sends in
        # start order first: the compiler can keep the order the schedule timed them in (timed_order). Where the
        # schedule fixes no order and ranks sit behind switch ports, rank r's peers in rotated order r+1, r+2,
        # ... (mod n): when every rank sends to many peers through its one port, no two ranks then target the
        # same receiving port at once (ascending order sends every rank to rank 0 first).
        rotate = self.algorithm.topology.num_ranks if self.algorithm.topology.switches else 0
        keys = [(send.start_us or 0.0, send.src, (send.dst - send.src) % rotate if rotate else send.dst, src, dst)
                for send, src, dst in planned]
        planned = [planned[k] for k in sorted(range(len(planned)), key=keys.__getitem__)]  # stable, as a sort by key
        emit, line, file, now, place = self.builder.emit, self.line, self.file, self.current, self.place
        for send, src, dst in self._order_reads_before_writes(planned):
            key = send.chunk * n + send.dst
            if send.op == REDUCE:
                here = now[key]
                if here is None:
                    raise LoweringError(f"{self.algorithm.name}: step {t}: rank {send.dst} reduces into chunk "
                                        f"{send.chunk} without holding a contribution")
                if here != dst:  # out-of-place: bring the local contribution to its home first
                    self._copy(send.dst, here, send.dst, dst)
                self._reduce(send.src, src, send.dst, dst)
            elif send.src != send.dst:  # _copy, inlined: a send between two ranks is never a no-op
                emit(COPY, unit_slot(send.src, src[0], src[1]), unit_slot(send.dst, dst[0], dst[1]), line, file,
                     NO_HINTS if place is None else place(send.src, send.dst))
            else:
                self._copy(send.src, src, send.dst, dst)
            # Sources were fixed when planning, so updating now only affects later reductions into `key`.
            now[key] = dst

    def _stage_groups(self, t: int, planned: list) -> list:
        """Emit every group of two or more sends of this step on one link as one message through scratch
        (see the module docstring); the other sends come back to be emitted as usual."""
        groups: defaultdict[tuple[int, int], list] = defaultdict(list)
        for item in planned:
            groups[(item[0].src, item[0].dst)].append(item)
        read = {(send.src, src) for send, src, _ in planned}
        rest = []
        for (s, d), group in groups.items():
            group.sort(key=lambda p: (p[1], p[2]))
            block, homes = [p[1] for p in group], [p[2] for p in group]
            reducing = group[0][0].op == REDUCE
            if (len(group) < 2 or _contiguous(block) and _contiguous(homes)  # one message already
                    or reducing and (any((d, h) in read for h in homes) or any(p[0].op != REDUCE for p in group))):
                rest += group
                continue
            if not _contiguous(block):  # gather the sources (reads of the start-of-step state)
                first = self._new_block(s, len(group))
                for k, (_, src, _) in enumerate(group):
                    self._copy(s, src, s, (SCRATCH, first + k))
                block = [(SCRATCH, first + k) for k in range(len(group))]
            direct = (not reducing and _contiguous(homes) and not any((d, h) in read for h in homes)
                      and all(self.current[p[0].chunk * self.n + d] is None for p in group))
            if direct:
                targets = homes
            else:
                first = self._new_block(d, len(group))
                targets = [(SCRATCH, first + k) for k in range(len(group))]
            self._emit(COPY, Slot(s, block[0][0], block[0][1], len(group)),
                       Slot(d, targets[0][0], targets[0][1], len(group)))
            for (send, _, home), target in zip(group, targets, strict=True):
                key = send.chunk * self.n + d
                if reducing:
                    here = self.current[key]
                    if here is None:
                        raise LoweringError(f"{self.algorithm.name}: step {t}: rank {d} reduces into chunk "
                                            f"{send.chunk} without holding a contribution")
                    if here != home:
                        self._copy(d, here, d, home)
                    self._reduce(d, target, d, home)
                    self.current[key] = home
                else:
                    self.current[key] = target
        return rest

    def _new_block(self, rank: int, count: int) -> int:
        first = self.scratch_used[rank]
        self.scratch_used[rank] += count
        return first

    def _order_reads_before_writes(self, planned: list) -> list:
        """Program order for one step: an op reading slot X precedes every op writing X (Kahn's algorithm);
        a cycle (two ops overwriting each other's source) is broken by staging a source in scratch."""
        if {(send.dst, *dst) for send, _, dst in planned}.isdisjoint([(send.src, *src) for send, src, _ in planned]):
            return planned  # no op writes what any op reads (the common case; flat keys hash faster): order kept
        writers: defaultdict[tuple[int, Place], list[int]] = defaultdict(list)
        for k, (send, _, dst) in enumerate(planned):
            writers[(send.dst, dst)].append(k)
        planned = list(planned)
        if not any(w != k for k, (send, src, _) in enumerate(planned) for w in writers.get((send.src, src), ())):
            return planned  # only ops that read what they write themselves: the order stays as it is
        while True:
            after: list[set[int]] = [set() for _ in planned]  # k -> ops that must come after k
            indegree = [0] * len(planned)
            for k, (send, src, _) in enumerate(planned):
                for w in writers.get((send.src, src), ()):
                    if w != k and w not in after[k]:
                        after[k].add(w)
                        indegree[w] += 1
            ready = [k for k in range(len(planned)) if indegree[k] == 0]  # a heap: keep the algorithm's order
            order: list[int] = []
            while ready:
                k = heapq.heappop(ready)
                order.append(k)
                for w in after[k]:
                    indegree[w] -= 1
                    if indegree[w] == 0:
                        heapq.heappush(ready, w)
            if len(order) == len(planned):
                return [planned[k] for k in order]
            # Stage the source of one op ON a cycle (ops left over may only sit downstream of one): walk
            # back along "must precede" edges until an op repeats. Staging removes its outgoing edges.
            before: dict[int, int] = {}
            for a in range(len(planned)):
                for w in after[a]:
                    if indegree[w] > 0 and indegree[a] > 0:
                        before.setdefault(w, a)
            k, seen = next(k for k in range(len(planned)) if indegree[k] > 0), set()
            while k not in seen:
                seen.add(k)
                k = before[k]
            send, src, dst = planned[k]
            staged = self._new_scratch(send.src)
            self._copy(send.src, src, send.src, staged)
            planned[k] = (send, staged, dst)

    def _copy(self, src_rank: int, src: Place, dst_rank: int, dst: Place) -> None:
        if src_rank == dst_rank and src == dst:
            return
        self._emit(COPY, unit_slot(src_rank, src[0], src[1]), unit_slot(dst_rank, dst[0], dst[1]))

    def _reduce(self, src_rank: int, src: Place, dst_rank: int, dst: Place) -> None:
        self._emit(ADD, unit_slot(src_rank, src[0], src[1]), unit_slot(dst_rank, dst[0], dst[1]))

    def _emit(self, op: str, src: Slot, dst: Slot) -> None:
        hints = NO_HINTS if self.place is None else self.place(src.rank, dst.rank)
        self.builder.emit(op, src, dst, self.line, self.file, hints)


def _contiguous(slots: list[Place]) -> bool:
    """Whether the slots are consecutive indices of one buffer, in this order."""
    return all(b[0] == slots[0][0] and b[1] == slots[0][1] + k for k, b in enumerate(slots))


# --- a readable, runnable Python file -------------------------------------------------------------

def program_to_python(program: Program, *, source: str = "") -> str:
    """A DSL file that rebuilds `program` (runnable with `collsynth compile FILE.py -o out.xml`)."""
    topo, coll = program.topology, program.collective
    lines = [f'"""{program.name}: a collsynth DSL program{" lowered from " + source if source else ""}.',
             "",
             "Compile it with: collsynth compile THIS_FILE.py -o out.xml",
             '"""', "",
             "import json", "",
             "from collsynth.collectives import Collective, make_collective",
             "from collsynth.language.builder import ProgramBuilder",
             "from collsynth.topologies import Topology, resolve_topology", ""]
    lines.append(f"topology = {_topology_expr(topo)}")
    if coll.name in STANDARD and make_collective(coll.name, coll.num_ranks, coll.chunks, root=coll.root,
                                                 inplace=coll.inplace) == coll:
        root = f", root={coll.root}" if coll.root is not None else ""
        lines.append(f"collective = make_collective({coll.name!r}, {coll.num_ranks}, {coll.chunks}{root}, "
                     f"inplace={coll.inplace})")
    else:
        lines.append(f"collective = Collective.from_dict(json.loads({json.dumps(json.dumps(coll.to_dict()))}))")
    options = program.options
    lines += [
        f"b = ProgramBuilder({program.name!r}, topology, collective, instances={program.instances}, "
        f"protocol={program.protocol!r}, instr_fusion={options.instr_fusion}, "
        f"interleaved_replication={options.interleaved_replication})",
        "",
    ]
    for op in program.ops:
        hints = "".join(f", {label}={value}" for label, value in
                        (("sendtb", op.sendtb), ("recvtb", op.recvtb), ("ch", op.channel)) if value is not None)
        src = f"b.chunk({op.src.rank}, {op.src.buffer!r}, {op.src.index}, {op.src.count})"
        if op.op == REDUCE:
            dst = f"b.chunk({op.dst.rank}, {op.dst.buffer!r}, {op.dst.index}, {op.dst.count})"
            lines.append(f"{dst}.reduce({src}{hints})")
        else:
            lines.append(f"{src}.copy({op.dst.rank}, {op.dst.buffer!r}, {op.dst.index}{hints})")
    lines += ["", "program = b.build()", "",
              'if __name__ == "__main__":',
              "    from collsynth.compiler import compile_program",
              "    from collsynth.emit.msccl_xml import ir_to_xml",
              "",
              "    print(ir_to_xml(compile_program(program)))", ""]
    return "\n".join(lines)


def _topology_expr(topo) -> str:
    try:
        if resolve_topology(topo.name).fingerprint() == topo.fingerprint():
            return f"resolve_topology({topo.name!r})"
    except TopologyError:
        pass
    return f"Topology.from_dict(json.loads({json.dumps(json.dumps(topo.to_dict()))}))"
