"""Switch channels for compiled MSCCL-IR: an AllReduce whose steps, taken together, are one reduce and one
broadcast per chunk across the whole switch group becomes a plan of multimem load-reduce-stores (`glres`).

No single MSCCL-IR step maps to a switch op: every step runs in a threadblock with one send peer and one
receive peer, while a multimem op addresses every member of the group at once. What maps is a group of steps:
for a chunk c with an owner rank r, the other members send r their own, unmodified chunk c (r reduces them),
and r sends the complete sum back to every member -- together exactly `glres` of chunk c by r (the switch
reads chunk c of every member, reduces, and stores the sum to every member). `switch_owners` finds that
pattern by running the IR symbolically in a valid MSCCL order (collsynth.emit.mscclpp.global_order): each
buffer slot holds the set of (rank, chunk) inputs summed into it, and every message between ranks must carry,
per chunk, either the sender's own input chunk (to the owner) or the complete sum (from the owner). Ring,
recursive halving-doubling and tree AllReduces send partial sums; one-phase all-pairs reduces every chunk at
every rank: none of them match, and the reason says which message or chunk broke the pattern.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

from collsynth.algorithms.mscclpp import supports_switch_channels, switch_allreduce_plan
from collsynth.core.steps import semantics
from collsynth.emit.mscclpp import PlanError, global_order
from collsynth.ir import Algo
from collsynth.topologies.model import Topology

Token = tuple[int, int]  # (input rank, input chunk)


def switch_owners(ir: Algo) -> list[int] | str:
    """Per chunk, the rank that reduces it and broadcasts the sum (the IR is that pattern), or why not."""
    if ir.collective != "allreduce":
        return f"{ir.collective} is not an AllReduce"
    n, chunks = ir.ngpus, ir.gpus[0].i_chunks
    values: dict[tuple[int, str, int], frozenset[Token]] = {}
    for rank in range(n):
        for c in range(chunks):
            values[(rank, "i", c)] = frozenset({(rank, c)})

    def key(rank: int, buf: str, index: int) -> tuple[int, str, int]:
        return (rank, "i" if ir.inplace and buf == "o" else buf, index)

    inbox: dict[tuple[int, int, int], deque[list[frozenset[Token]]]] = defaultdict(deque)
    owner_of: dict[int, int] = {}
    for rank, tb, step in global_order(ir):
        sem = semantics(step.type)
        src = ([values.get(key(rank, step.srcbuf, step.srcoff + k), frozenset()) for k in range(step.cnt)]
               if sem.reads_src else [])
        got = inbox[(tb.recv, rank, tb.chan)].popleft() if sem.receives else []
        if step.type == "re":
            dst_old = [values.get(key(rank, step.dstbuf, step.dstoff + k), frozenset()) for k in range(step.cnt)]
            result = [a | b for a, b in zip(dst_old, src, strict=True)]
        elif sem.receives and sem.reduces:
            result = [a | b for a, b in zip(got, src, strict=True)]
        else:
            result = got if sem.receives else src
        if sem.writes_dst:
            for k, value in enumerate(result):
                values[key(rank, step.dstbuf, step.dstoff + k)] = value
        if sem.sends:
            why = _check_message(result, rank, tb.send, n, owner_of)
            if why:
                return why
            inbox[(rank, tb.send, tb.chan)].append(result)
    missing = [c for c in range(chunks) if c not in owner_of]
    if missing:
        return f"chunk {missing[0]} is never sent to or from one owner rank"
    return [owner_of[c] for c in range(chunks)]


def _check_message(message: list[frozenset[Token]], sender: int, receiver: int, n: int,
                   owner_of: dict[int, int]) -> str | None:
    """None when every chunk of the message is the sender's own input (to the owner) or a complete sum
    (from the owner); records the owners it implies."""
    for value in message:
        chunk_ids = {c for _, c in value}
        if len(chunk_ids) != 1:
            return f"rank {sender} sends rank {receiver} a mix of chunks {sorted(chunk_ids)}"
        c = chunk_ids.pop()
        if value == frozenset({(sender, c)}):
            owner = receiver
        elif len(value) == n:
            owner = sender
        else:
            return (f"rank {sender} sends rank {receiver} a partial sum of chunk {c} ({len(value)} of {n} ranks): "
                    "no switch group reduce")
        if owner_of.setdefault(c, owner) != owner:
            return f"chunk {c} is reduced at ranks {owner_of[c]} and {owner}: no single switch group reduce"
    return None


def ir_to_switch_plan(ir: Algo, topology: Topology, name: str | None = None) -> dict[str, Any]:
    """The switch-channel plan of an AllReduce IR whose steps are one group reduce + broadcast per chunk
    (switch_owners); PlanError (one line) when the topology has no NVLink SHARP or the IR is not that."""
    if not supports_switch_channels(topology.name) or topology.num_machines != 1:
        raise PlanError(f"{topology.name} has no NVLink SHARP switch channels; use memory/port channels")
    owners = switch_owners(ir)
    if isinstance(owners, str):
        raise PlanError(f"{ir.name}: no switch-channel form ({owners}); lower it to memory/port channels")
    return switch_allreduce_plan(ir.ngpus, name or f"{ir.name}_switch", inplace=ir.inplace, owners=owners)
