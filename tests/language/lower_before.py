"""The lowering as it was before its speed-ups (main 42ea08b, issue 10): the reference the fast lowering must equal
op for op (tests/language/test_lower_fast_paths.py). Kept verbatim but for this docstring and `lower_before`."""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

from collsynth.language.builder import ProgramBuilder
from collsynth.language.lower import INPUT, OUTPUT, SCRATCH, LoweringError, Place
from collsynth.language.program import COPY, Program, Slot, alias_slot
from collsynth.language.program import REDUCE as ADD
from collsynth.schedule.algorithm import REDUCE, Algorithm, Send


def lower_before(algorithm: Algorithm, at: tuple[int, str], *, instances: int = 1,
                 merge: str = "contiguous") -> Program:
    """`lower_to_program` of main 42ea08b, every op located at `at`."""
    coll = algorithm.collective
    builder = ProgramBuilder(algorithm.name, algorithm.topology, coll, instances=instances)
    _Lowering(builder, algorithm, coll, stage=merge == "stage", at=at).run()
    problems = builder.check()
    if problems:
        raise LoweringError(f"lowered program {builder.name!r} fails its postcondition: {problems[0]}")
    program = builder.build()
    if any(send.start_us is not None for _, send in algorithm.sends()):
        program = replace(program, options=replace(program.options, aggregate_either_end=False))
    return program


class _Lowering:
    def __init__(self, builder: ProgramBuilder, algorithm: Algorithm, coll, stage: bool = False,
                 at: tuple[int, str] = (0, "")) -> None:
        self.builder, self.algorithm, self.coll, self.stage = builder, algorithm, coll, stage
        self.line, self.file = at
        self.current: dict[tuple[int, int], Place] = {}  # (chunk, rank) -> where the rank holds it now
        self.scratch: dict[tuple[int, int], Place] = {}  # (chunk, rank) -> its scratch home
        self.scratch_used: defaultdict[int, int] = defaultdict(int)
        for c, r, i in coll.inputs:
            self.current[(c, r)] = self._alias(r, INPUT, i)

    def _alias(self, rank: int, buffer: str, index: int) -> Place:
        return alias_slot(self.coll, rank, buffer, index)

    def _new_scratch(self, rank: int) -> Place:
        index = self.scratch_used[rank]
        self.scratch_used[rank] += 1
        return (SCRATCH, index)

    def home(self, chunk: int, rank: int) -> Place:
        if rank in self.coll.post[chunk]:
            return self._alias(rank, OUTPUT, self.coll.output_index(chunk, rank))
        if not self.coll.combining and (chunk, rank) in self.current:
            return self.current[(chunk, rank)]  # a non-combining chunk never changes: keep it where it is
        if (chunk, rank) not in self.scratch:
            self.scratch[(chunk, rank)] = self._new_scratch(rank)
        return self.scratch[(chunk, rank)]

    def run(self) -> None:
        for t, step in enumerate(self.algorithm.steps):
            self._lower_step(t, _dedupe(step.sends, self.coll.combining, self.current))
        for c in range(self.coll.num_chunks):
            for r in sorted(self.coll.post[c]):
                where, home = self.current.get((c, r)), self.home(c, r)
                if where is None:
                    raise LoweringError(f"{self.algorithm.name}: rank {r} never receives chunk {c}")
                if where != home:
                    self._copy(r, where, r, home)
                    self.current[(c, r)] = home

    def _lower_step(self, t: int, sends: list[Send]) -> None:
        # Plan every op against the state at the start of the step.
        planned = []
        for send in sends:
            src = self.current.get((send.chunk, send.src))
            if src is None:
                raise LoweringError(f"{self.algorithm.name}: step {t}: rank {send.src} sends chunk {send.chunk} "
                                    "before holding it")
            planned.append((send, src, self.home(send.chunk, send.dst)))
        if self.stage:
            planned = self._stage_groups(t, planned)
        # A link's sends in slot order, so contiguous ones are adjacent (one message); timed (MILP) sends in
        # start order first: the compiler can keep the order the schedule timed them in (timed_order). Where the
        # schedule fixes no order and ranks sit behind switch ports, rank r's peers in rotated order r+1, r+2,
        # ... (mod n): when every rank sends to many peers through its one port, no two ranks then target the
        # same receiving port at once (ascending order sends every rank to rank 0 first).
        n = self.algorithm.topology.num_ranks if self.algorithm.topology.switches else 0
        planned.sort(key=lambda p: (p[0].start_us or 0.0, p[0].src, (p[0].dst - p[0].src) % n if n else p[0].dst,
                                    p[1], p[2]))
        for send, src, dst in self._order_reads_before_writes(planned):
            key = (send.chunk, send.dst)
            if send.op == REDUCE:
                here = self.current.get(key)
                if here is None:
                    raise LoweringError(f"{self.algorithm.name}: step {t}: rank {send.dst} reduces into chunk "
                                        f"{send.chunk} without holding a contribution")
                if here != dst:  # out-of-place: bring the local contribution to its home first
                    self._copy(send.dst, here, send.dst, dst)
                self._reduce(send.src, src, send.dst, dst)
            else:
                self._copy(send.src, src, send.dst, dst)
            # Sources were fixed when planning, so updating now only affects later reductions into `key`.
            self.current[key] = dst

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
                      and all((p[0].chunk, d) not in self.current for p in group))
            if direct:
                targets = homes
            else:
                first = self._new_block(d, len(group))
                targets = [(SCRATCH, first + k) for k in range(len(group))]
            self.builder.emit(COPY, Slot(s, block[0][0], block[0][1], len(group)),
                              Slot(d, targets[0][0], targets[0][1], len(group)), self.line, self.file)
            for (send, _, home), target in zip(group, targets, strict=True):
                key = (send.chunk, d)
                if reducing:
                    here = self.current.get(key)
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
        writers: defaultdict[tuple[int, Place], list[int]] = defaultdict(list)
        for k, (send, _, dst) in enumerate(planned):
            writers[(send.dst, dst)].append(k)
        planned = list(planned)
        if not any(w != k for k, (send, src, _) in enumerate(planned) for w in writers.get((send.src, src), ())):
            return planned  # no op writes what another reads: the order stays as it is
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
        self.builder.emit(COPY, Slot(src_rank, src[0], src[1]), Slot(dst_rank, dst[0], dst[1]), self.line, self.file)

    def _reduce(self, src_rank: int, src: Place, dst_rank: int, dst: Place) -> None:
        self.builder.emit(ADD, Slot(src_rank, src[0], src[1]), Slot(dst_rank, dst[0], dst[1]), self.line,
                          self.file)


def _contiguous(slots: list[Place]) -> bool:
    """Whether the slots are consecutive indices of one buffer, in this order."""
    return all(b[0] == slots[0][0] and b[1] == slots[0][1] + k for k, b in enumerate(slots))


def _dedupe(sends: tuple[Send, ...], combining: bool, current: dict) -> list[Send]:
    """Drop copies of a non-combining chunk to a rank that already has it (they change nothing)."""
    if combining:
        return list(sends)
    seen, kept = set(), []
    for send in sends:
        key = (send.chunk, send.dst)
        if key in seen or key in current:
            continue
        seen.add(key)
        kept.append(send)
    return kept
