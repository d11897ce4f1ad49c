"""split_to_target: fit a compiled program into a runtime target's limits (collsynth.core.targets).

Two ways to make a program fit, both keep every connection's message order intact:
- `spread_channels(cdag, k)`: every chain of transfers (a send, the fused steps it flows through, the final
  receive) of channel c moves, round robin over the chains of c, to channel c + C*g (g in 0..k-1, C the channels
  in use). A threadblock's steps are split over k threadblocks; chains move whole, so on every new channel each
  rank still pairs a receive peer with one send peer (the chains of channel c + C*g all came from channel c).
- otherwise nothing: a program that still breaks a limit with the most channels the target allows is refused with
  one line naming the limit and the runtime.

`target_violation(ir, target)` is the one check of an IR against a target's loader limits (the compiler, the
XML writers and `collsynth doctor` use it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from collsynth.compiler.dag import transfer_chain
from collsynth.compiler.errors import CompileError
from collsynth.compiler.placement import ChannelledDAG, Placement, Schedule, TbPlan, with_channels
from collsynth.core.limits import MAX_CHANNELS, MAX_COUNT, MAX_TBS_PER_CHANNEL
from collsynth.core.steps import RECEIVING_TYPES, SENDING_TYPES
from collsynth.core.targets import Target, get_target
from collsynth.ir import NOP, REDUCE, SEND, Algo, Step, Threadblock, coll_spelling
from collsynth.ir.validate import CrowdedChannelError, IRError
from collsynth.language.program import Program, Slot


class TargetLimitError(CompileError):
    """A program the target's runtime cannot hold even after splitting."""


def target_violation(ir: Algo, target: Target | str) -> str | None:
    """The first limit of the target's loader the IR breaks, as one line naming the limit and the runtime;
    None when the runtime loads it."""
    t = get_target(target)
    if not t.runtime_limits:
        return None
    if coll_spelling(ir.collective) == "custom" and not t.accepts_custom:
        return (f"{t.runtime} cannot load a user-defined collective (coll=\"custom\"): it refuses any coll outside "
                "its built-in collectives; use --target msccl-legacy or --target none")
    if ir.nchannels > t.max_channels:
        return f"{t.runtime} runs at most {t.max_channels} channels; the algorithm needs {ir.nchannels}"
    for gpu in ir.gpus:
        ids = sorted(tb.id for tb in gpu.tbs)
        if ids != list(range(len(ids))):
            return (f"{t.runtime} needs each GPU's thread block ids to be 0..n-1 without a gap or repeat (thread "
                    f"block is missing); rank {gpu.id} has {ids[:8]}{'...' if len(ids) > 8 else ''}")
        if len(gpu.tbs) > t.max_tbs_per_gpu:
            return (f"{t.runtime} runs at most {t.max_tbs_per_gpu} thread blocks per GPU (too many thread blocks are "
                    f"requested); rank {gpu.id} needs {len(gpu.tbs)}")
        for tb in gpu.tbs:
            if len(tb.steps) > t.max_steps_per_tb:
                return (f"{t.runtime} runs at most {t.max_steps_per_tb} steps per thread block (too many steps are "
                        f"requested); rank {gpu.id} thread block {tb.id} needs {len(tb.steps)}")
            for step in tb.steps:
                if step.depid > t.max_depid:
                    return (f"{t.runtime} stores a dependency's thread block id in 8 bits (at most {t.max_depid}); "
                            f"rank {gpu.id} thread block {tb.id} step {step.s} depends on thread block {step.depid}")
                if step.cnt > t.max_count:
                    return (f"{t.runtime} moves at most {t.max_count} chunks per step; rank {gpu.id} thread block "
                            f"{tb.id} step {step.s} moves {step.cnt}")
                if max(step.srcoff, step.dstoff) > t.max_offset:
                    return (f"{t.runtime} stores a chunk offset in 16 bits (at most {t.max_offset}); rank {gpu.id} "
                            f"thread block {tb.id} step {step.s} uses offset {max(step.srcoff, step.dstoff)}")
            broken = _dependency_chain_break(tb.steps, t.max_reduce_fusion)
            if broken is not None:
                return (f"{t.runtime} ignores the XML: a chain of dependencies (nops) must end in a step that "
                        f"carries a dependency itself; rank {gpu.id} thread block {tb.id} step {broken} does not")
        crowded = _crowded_channel(gpu.tbs, t.max_tbs_per_channel)
        if crowded is not None:
            return f"{t.runtime} allows at most {t.max_tbs_per_channel} {crowded[1]} thread blocks per channel " \
                   f"(too many {crowded[1]}s per channel); rank {gpu.id} channel {crowded[0]} has more"
    return None


def _crowded_channel(tbs: tuple[Threadblock, ...], limit: int) -> tuple[int, str] | None:
    """The first (channel, 'send' or 'recv') with more than `limit` threadblocks of that side, if any."""
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for tb in tbs:
        if tb.send >= 0:
            sends[tb.chan] = sends.get(tb.chan, 0) + 1
        if tb.recv >= 0:
            recvs[tb.chan] = recvs.get(tb.chan, 0) + 1
    for side, counts in (("send", sends), ("recv", recvs)):
        for chan in sorted(counts):
            if counts[chan] > limit:
                return chan, side
    return None


def _dependency_chain_break(steps: tuple[Step, ...], max_fusion: int) -> int | None:
    """The `s` of the first step that ends a list of nop dependencies without a dependency of its own, as the
    loaders' parsers (msccl_parser.cc, topo.cc) walk a threadblock: consecutive `re` steps into one destination
    (no depid, no hasdep, fewer than `max_fusion` reductions so far) continue one transfer and end no list."""
    deps = pointer = reductions = 0
    chain: tuple[str, int, str] | None = None  # (dstbuf, dstoff, srcbuf) of an open reduction chain
    for step in steps:
        if step.depid >= 0:
            deps += 1
        continuation = False
        if step.type == REDUCE:
            continuation = chain == (step.dstbuf, step.dstoff, step.srcbuf) and step.depid == -1
            if not continuation:
                chain = None
        if step.type == NOP:
            continue
        if not continuation:
            if deps > pointer and step.depid < 0:
                return step.s
            pointer = deps
        if step.type != REDUCE:
            chain = None
        else:
            reductions += 1
            chain = None if step.hasdep or reductions == max_fusion else (step.dstbuf, step.dstoff, step.srcbuf)
    return None


def chains(cdag: ChannelledDAG) -> list[list[int]]:
    """Every chain of transfers: a send, the fused steps its chunk flows through, the final receive."""
    instrs = cdag.dag.instrs
    return [transfer_chain(instrs, head) for head, ins in enumerate(instrs) if ins.kind == SEND]


def spread_channels(cdag: ChannelledDAG, k: int) -> ChannelledDAG:
    """Move the chains of each channel c round robin over channels c, c+C, ..., c+(k-1)C (C channels in use)."""
    if k <= 1:
        return cdag
    used = channels_in_use(cdag)
    channel = list(cdag.channel)
    turn: dict[int, int] = {}
    for chain in chains(cdag):
        c = cdag.channel[chain[0]]
        g = turn.get(c, 0)
        turn[c] = g + 1
        for m in chain:
            channel[m] = c + used * (g % k)
    # a local copy/reduce pinned to a channel stays where it was; unpinned ones (-1) go anywhere
    return with_channels(cdag.dag, channel)


def channels_in_use(cdag: ChannelledDAG) -> int:
    return max((c for c in cdag.channel if c >= 0), default=0) + 1


CompileOnce = Callable[[Program, int, bool], Algo]


def split_to_target(program: Program, target: Target | str, compile_once: CompileOnce) -> Algo:
    """Compile with 1, 2, 3, ... way channel spreading until the target's runtime loads the IR; refuse (one
    line naming the limit and the runtime) when even the most channels the runtime allows do not fit."""
    t = get_target(target)
    try:
        ir = _fit_ids(compile_once(program, 1, False), t)
    except CrowdedChannelError as error:  # the IR's own check: more threadblocks on a channel than MSCCL runs
        if program.options.threadblock_policy == "manual":
            raise
        return _spread_until_it_fits(program, t, compile_once, str(error), -(-error.count // MAX_TBS_PER_CHANNEL))
    problem = target_violation(ir, t)
    if problem is None:
        return ir
    if "thread blocks per GPU" in problem or "8 bits" in problem:
        try:
            ir = _fit_ids(compile_once(program, 1, True), t)
        except CompileError:
            pass
        else:
            paired = target_violation(ir, t)
            if paired is None:
                return ir
        if program.instances > 1 and program.options.interleaved_replication:
            try:
                folded = _fit_ids(compile_once(fold_instances(program), 1, True), t)
            except CompileError:
                pass
            else:
                if target_violation(folded, t) is None:
                    return folded
    if program.options.threadblock_policy == "manual":
        raise TargetLimitError(f"program {program.name!r}: {problem}; its threadblocks are placed by hand "
                               "(threadblock_policy manual), so the compiler does not split them: move ops to more "
                               "threadblocks or channels")
    # k-way spreading leaves some threadblock at least 1/k of the longest one's steps: fewer ways cannot fit
    longest = max((len(tb.steps) for _, tb in ir.threadblocks()), default=0)
    k = max(2, -(-longest // t.max_steps_per_tb)) if "steps per thread block" in problem else 2
    return _spread_until_it_fits(program, t, compile_once, problem, k, base=ir.nchannels)


def _spread_until_it_fits(program: Program, t: Target, compile_once: CompileOnce, problem: str, k: int,
                          base: int = 1) -> Algo:
    """Compile with k, k+1, ... way channel spreading until the IR fits `t`; refuse once `base * k` channels
    would exceed what the runtime has."""
    first = problem
    limit = min(t.max_channels, MAX_CHANNELS)
    k = max(k, 2)
    while _splits_steps(problem) and base * k <= limit:
        try:
            candidate = _fit_ids(compile_once(program, k, False), t)
        except CrowdedChannelError as error:
            problem = str(error)
        except (CompileError, IRError):
            break
        else:
            problem = target_violation(candidate, t) or ""
            if not problem:
                return candidate
        k += 1
    raise TargetLimitError(f"program {program.name!r} does not fit {t.name}: {first}, and no split over at most "
                           f"{limit} channels fits either ({problem})")


def _splits_steps(problem: str) -> bool:
    """Spreading channels shortens threadblocks and thins crowded channels; it cannot reduce the number of thread
    blocks per GPU or load custom colls."""
    return ("steps per thread block" in problem or "thread blocks per channel" in problem
            or "threadblocks on channel" in problem)


def steps_per_connection(ir: Algo) -> int:
    """The most send or receive steps one threadblock runs (what spreading divides)."""
    return max((sum(1 for s in tb.steps if s.type in SENDING_TYPES or s.type in RECEIVING_TYPES)
                for _, tb in ir.threadblocks()), default=0)


def _fit_ids(ir: Algo, target: Target) -> Algo:
    """Renumber threadblocks when a dependency names one beyond the target's 8-bit field."""
    worst = max((s.depid for _, tb in ir.threadblocks() for s in tb.steps), default=-1)
    return waited_first(ir) if worst > target.max_depid else ir


def waited_first(ir: Algo) -> Algo:
    """The same IR with each GPU's threadblocks renumbered so that those another step waits on come first
    (lowest ids), in their old order; the others follow in their old order. Dependencies are renamed."""
    gpus = []
    for gpu in ir.gpus:
        waited = {s.depid for tb in gpu.tbs for s in tb.steps if s.depid >= 0}
        order = [tb.id for tb in gpu.tbs if tb.id in waited] + [tb.id for tb in gpu.tbs if tb.id not in waited]
        new_id = {old: new for new, old in enumerate(order)}
        tbs = tuple(replace(gpu.tbs[old], id=new_id[old], steps=tuple(
            replace(s, depid=new_id[s.depid]) if s.depid >= 0 else s for s in gpu.tbs[old].steps)) for old in order)
        gpus.append(replace(gpu, tbs=tbs))
    return replace(ir, gpus=tuple(gpus))


def pair_threadblocks(sched: Schedule, placed: Placement) -> Placement:
    """Fewer threadblocks: on each rank and channel, a send-only threadblock and a receive-only one become one
    threadblock (send p, recv q), and each local copy/reduce joins the shortest threadblock of its rank.
    Each merged threadblock runs its instrs in the global schedule order (a topological order every
    threadblock already follows), so merging adds no wait that the schedule does not already respect."""
    position = [0] * len(sched.order)
    for k, i in enumerate(sched.order):
        position[i] = k
    tbs: list[tuple[TbPlan, ...]] = []
    for rank_tbs in placed.tbs:
        senders = [tb for tb in rank_tbs if tb.send >= 0 and tb.recv < 0]
        receivers = [tb for tb in rank_tbs if tb.recv >= 0 and tb.send < 0]
        merged: list[TbPlan] = [tb for tb in rank_tbs if tb.send >= 0 and tb.recv >= 0]
        by_chan: dict[int, list[TbPlan]] = {}
        for tb in receivers:
            by_chan.setdefault(tb.chan, []).append(tb)
        for tb in senders:
            waiting = by_chan.get(tb.chan)
            if waiting:
                other = waiting.pop(0)
                merged.append(TbPlan(tb.send, other.recv, tb.chan,
                                     tuple(sorted(tb.instrs + other.instrs, key=position.__getitem__))))
            else:
                merged.append(tb)
        merged += [tb for chan in sorted(by_chan) for tb in by_chan[chan]]
        local = sorted((i for tb in rank_tbs if tb.send < 0 and tb.recv < 0 for i in tb.instrs),
                       key=position.__getitem__)
        if local and not merged:
            merged = [tb for tb in rank_tbs if tb.send < 0 and tb.recv < 0]
        elif local:
            # each local copy/reduce joins the shortest threadblock of its rank
            hosts = [list(tb.instrs) for tb in merged]
            for i in local:
                min(hosts, key=len).append(i)
            merged = [replace(tb, instrs=tuple(sorted(h, key=position.__getitem__))) for tb, h in zip(merged, hosts,
                                                                                                  strict=True)]
        tbs.append(tuple(merged))
    return Placement.of(placed.dag, tuple(tbs))


def fold_instances(program: Program) -> Program:
    """The program's `instances` copies as one instance on the same channels: every chunk split into
    `instances` parts laid out as replication lays them out (part k of index j at j * instances + k), every op
    repeated per part. The copies then share threadblocks instead of each taking its own."""
    k = program.instances
    if k == 1:
        return program
    if not program.options.interleaved_replication:
        raise TargetLimitError(f"program {program.name!r}: folding instances needs the interleaved chunk layout "
                               "(interleaved_replication=True)")
    from collsynth.compiler.lowering import instance_collective

    # An op on chunks [i, i+c) of every copy is, in the folded layout, the one contiguous range [i*k, (i+c)*k)
    # (part p of chunk j sits at j*k + p on both sides, so source and destination keep a constant offset): one
    # op per piece of at most MAX_COUNT chunks, not one per chunk and part, so that steps stay few.
    ops = []
    for op in program.ops:
        for start, count in _pieces(op.src.count * k):
            ops.append(replace(op, src=Slot(op.src.rank, op.src.buffer, op.src.index * k + start, count),
                               dst=Slot(op.dst.rank, op.dst.buffer, op.dst.index * k + start, count)))
    buffers = tuple(tuple((name, size * k) for name, size in named) for named in program.buffers)
    return replace(program, collective=instance_collective(program.collective, k), instances=1,
                   buffers=buffers, ops=tuple(ops))


def _pieces(count: int) -> list[tuple[int, int]]:
    """[0, count) as (start, count) pieces of at most MAX_COUNT chunks, as even as possible."""
    parts = -(-count // MAX_COUNT)
    base, extra = divmod(count, parts)
    starts = [p * base + min(p, extra) for p in range(parts + 1)]
    return [(starts[p], starts[p + 1] - starts[p]) for p in range(parts)]
