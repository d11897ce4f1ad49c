"""The MSCCL++ paper's AllReduce algorithms (Shah et al., "MSCCL++: Rethinking GPU Communication
Abstractions", 2025), as library entries for execution plans.

Four of them are the library's own DSL programs lowered with a channel choice (collsynth.emit.mscclpp does
the lowering; this stage only names them):
* `mscclpp_1pa_ll`: one-phase all-pairs (every rank reads every other rank's whole buffer), LL packets;
* `mscclpp_2pa_memory` / `mscclpp_2pa_port`: two-phase all-pairs (reduce-scatter then all-gather among all
  pairs), Simple, over memory channels (thread copies) or port channels (DMA through the proxy);
* `mscclpp_2ph`: two-phase hierarchical for several nodes (memory channels inside a node, port across).
The fifth cannot be said in the DSL (MSCCL-IR has no multimem step), so it is written directly as a plan:
* `mscclpp_2pa_switch`: two-phase all-pairs on NVLink SHARP: rank r asks the switch to load-reduce chunk r
  of every rank's buffer and to store the sum back to every rank (`glres`, one multimem ld_reduce + st), with a
  signal/wait barrier over memory channels before (inputs ready) and after (results visible); in place, or
  out of place (reads the input buffers' multicast address, stores to the output buffers').
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collsynth.algorithms._common import AlgorithmError


@dataclass(frozen=True)
class MscclppVariant:
    name: str
    library_program: str | None  # the library DSL program lowered to the plan; None: a direct plan builder
    protocol: str
    channels: str  # channel policy of the lowering: auto, memory, port; "switch" for the direct plan
    multi_node: bool
    description: str
    # plan threadblocks per rank (None: one per MSCCL-IR threadblock where the semaphores allow). 1 for the
    # all-pairs algorithms: one threadblock reduces every peer's contribution in one op, as MSCCL++'s plans do,
    # instead of a chain of reductions ordered across threadblocks by semaphores.
    groups: int | None = None


MSCCLPP_VARIANTS: tuple[MscclppVariant, ...] = (
    MscclppVariant("mscclpp_1pa_ll", "allpairs_allreduce_one_phase", "LL", "auto", False,
                   "one-phase all-pairs AllReduce, LL packets", groups=1),
    MscclppVariant("mscclpp_2pa_memory", "allpairs_allreduce_two_phase", "Simple", "memory", False,
                   "two-phase all-pairs AllReduce over memory channels", groups=1),
    MscclppVariant("mscclpp_2pa_port", "allpairs_allreduce_two_phase", "Simple", "port", False,
                   "two-phase all-pairs AllReduce over port channels (DMA)", groups=1),
    MscclppVariant("mscclpp_2pa_switch", None, "Simple", "switch", False,
                   "two-phase all-pairs AllReduce with NVLink SHARP multimem load-reduce-store"),
    MscclppVariant("mscclpp_2ph", "hierarchical_allreduce", "Simple", "auto", True,
                   "two-phase hierarchical AllReduce: memory channels in a node, port channels across"),
)

# NVLink SHARP (NVSwitch multicast + in-switch reduction) ships with NVSwitch gen 3 (H100/H200 HGX).
NVLS_TOPOLOGIES = ("h100_nvswitch",)


def supports_switch_channels(topology_name: str) -> bool:
    """Whether the topology's GPUs sit on an NVLink SHARP switch (one node of a built-in H100 NVSwitch)."""
    return topology_name in NVLS_TOPOLOGIES


def switch_allreduce_plan(num_ranks: int, name: str = "mscclpp_2pa_switch", inplace: bool = True,
                          owners: Sequence[int] | None = None) -> dict[str, Any]:
    """The AllReduce plan of `mscclpp_2pa_switch` for `num_ranks` GPUs on one NVLS switch. Each rank's buffer
    is `len(owners)` chunks (default `num_ranks`); chunk c is reduced through the switch by rank `owners[c]`
    (default c), consecutive chunks of one owner in one op. In place, one switch channel (the input buffer) is
    read and written; out of place, the reduction reads the input buffers' switch channel and stores through
    the output buffers'."""
    if num_ranks < 2:
        raise AlgorithmError(f"{name} needs at least 2 ranks, got {num_ranks}")
    owners = list(range(num_ranks)) if owners is None else list(owners)
    if not owners or any(not 0 <= o < num_ranks for o in owners):
        raise AlgorithmError(f"{name}: every chunk needs an owner rank in 0..{num_ranks - 1}, got {owners}")
    group = [{"size": len(owners), "ranks": list(range(num_ranks))}]
    switches = [{"channel_type": "switch", "buffer_type": "i", "rank_groups": group}]
    if not inplace:
        switches.append({"channel_type": "switch", "buffer_type": "o", "rank_groups": group})
    out = len(switches) - 1
    gpus = []
    for rank in range(num_ranks):
        peers = [p for p in range(num_ranks) if p != rank]
        barrier = _barrier(len(peers))
        reduce = [{"name": "glres", "channel_type": "switch", "reduce_op": "sum",
                   "src_buff": [{"switch_channel_id": 0, "index": start, "size": size}],
                   "dst_buff": [{"switch_channel_id": out, "index": start, "size": size}]}
                  for start, size in _runs([c for c, owner in enumerate(owners) if owner == rank])]
        tb = {"id": 0, "ops": barrier + reduce + barrier,
              "channels": [{"channel_type": "memory", "channel_ids": list(range(len(peers)))},
                           {"channel_type": "switch", "channel_ids": list(range(len(switches)))}],
              "remote_buffer_refs": []}
        gpus.append({
            "id": rank, "input_chunks": len(owners), "output_chunks": len(owners), "scratch_chunks": 0,
            "threadblocks": [tb], "channels": [{"channel_type": "memory", "connected_to": peers}, *switches],
            "remote_buffers": [], "semaphores": [],
        })
    return {"name": name, "collective": "allreduce", "protocol": "Simple", "inplace": inplace,
            "reuse_resources": False, "use_double_scratch_buffer": False, "buffer_alignment": 16,
            "min_message_size": 0, "max_message_size": 2**64 - 1,
            "num_threads_per_block": 1024, "gpus": gpus}


def _runs(chunks: list[int]) -> list[tuple[int, int]]:
    """Sorted chunk indices as (first, count) runs of consecutive indices."""
    runs: list[tuple[int, int]] = []
    for c in chunks:
        if runs and runs[-1][0] + runs[-1][1] == c:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((c, 1))
    return runs


def _barrier(num_peers: int) -> list[dict[str, Any]]:
    """Signal every peer, then wait for every peer, at most 8 channels per op (MAX_CHANNEL_PER_OPERATION)."""
    batches = [list(range(k, min(k + 8, num_peers))) for k in range(0, num_peers, 8)]
    return ([{"name": "signal", "channel_type": "memory", "channel_ids": ids} for ids in batches]
            + [{"name": "wait", "channel_type": "memory", "channel_ids": ids} for ids in batches])
