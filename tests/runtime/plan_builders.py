"""Hand-written execution plans that use each op the plan interpreter runs (for tests of its semantics).

Every plan is n ranks on memory channels (channel k of rank r goes to its k-th peer in rank order) and every
remote buffer of every peer is listed in a fixed order: remote buffer `_rid(peers, p, kind)`.
"""

from __future__ import annotations

from typing import Any

KINDS = ("i", "o", "s")


def _peers(rank: int, n: int) -> list[int]:
    return [p for p in range(n) if p != rank]


def _rid(peers: list[int], peer: int, kind: str) -> int:
    return peers.index(peer) * len(KINDS) + KINDS.index(kind)


def _remote(buffer_id: int, index: int, size: int = 1) -> dict[str, Any]:
    return {"buffer_id": buffer_id, "index": index, "size": size}


def _local(kind: str, index: int, size: int = 1) -> dict[str, Any]:
    return {"type": kind, "index": index, "size": size}


def _sync(n: int, relaxed: bool = False) -> list[dict[str, Any]]:
    ids = list(range(n - 1))
    return [{"name": "rlxsignal" if relaxed else "signal", "channel_type": "memory", "channel_ids": ids},
            {"name": "rlxwait" if relaxed else "wait", "channel_type": "memory", "channel_ids": ids}]


def plan(name: str, collective: str, n: int, chunks: tuple[int, int, int], ops_of, protocol: str = "Simple",
         inplace: bool = True) -> dict[str, Any]:
    """`ops_of(rank, peers)` -> list of ops per threadblock (one list per threadblock)."""
    gpus = []
    for rank in range(n):
        peers = _peers(rank, n)
        per_tb = ops_of(rank, peers)
        threadblocks = [{"id": t, "ops": ops, "channels": [{"channel_type": "memory",
                                                            "channel_ids": list(range(n - 1))}],
                         "remote_buffer_refs": [{"access_channel_type": "memory",
                                                 "remote_buffer_ids": list(range(len(KINDS) * (n - 1)))}]}
                        for t, ops in enumerate(per_tb)]
        gpus.append({"id": rank, "input_chunks": chunks[0], "output_chunks": chunks[1], "scratch_chunks": chunks[2],
                     "threadblocks": threadblocks,
                     "channels": [{"channel_type": "memory", "connected_to": peers}],
                     "remote_buffers": [{"rank": p, "type": k, "access_channel_types": ["memory"]}
                                        for p in peers for k in KINDS],
                     "semaphores": []})
    return {"name": name, "collective": collective, "protocol": protocol, "inplace": inplace, "gpus": gpus}


def rres_allreduce(n: int, relaxed: bool = False, first_sync: bool = True) -> dict[str, Any]:
    """Two-phase all-pairs AllReduce by reading: rank r reads chunk r of every peer (rres), reduces it with
    its own and writes the sum back to every peer."""
    def ops(rank: int, peers: list[int]) -> list[list[dict[str, Any]]]:
        op = {"name": "rres", "channel_type": "memory",
              "src_buff": [_local("i", rank)] + [_remote(_rid(peers, p, "i"), rank) for p in peers],
              "dst_buff": [_local("i", rank)] + [_remote(_rid(peers, p, "i"), rank) for p in peers]}
        return [(_sync(n, relaxed) if first_sync else []) + [op] + _sync(n)]
    return plan("rres_allreduce", "allreduce", n, (n, n, 0), ops)


def rre_get_allreduce(n: int) -> dict[str, Any]:
    """rre reduces chunk r from every peer locally, then every rank gets the other reduced chunks."""
    def ops(rank: int, peers: list[int]) -> list[list[dict[str, Any]]]:
        reduce = {"name": "rre", "channel_type": "memory", "src_buff": [_local("i", rank)]
                  + [_remote(_rid(peers, p, "i"), rank) for p in peers], "dst_buff": [_local("s", 0)]}
        gets = {"name": "get", "channel_type": "memory", "src_buff": [_remote(_rid(peers, p, "s"), 0) for p in peers],
                "dst_buff": [_local("o", p) for p in peers]}
        copy = {"name": "copy", "src_buff": [_local("s", 0)], "dst_buff": [_local("o", rank)]}
        return [_sync(n) + [reduce] + _sync(n) + [gets, copy] + _sync(n)]
    return plan("rre_get_allreduce", "allreduce", n, (n, n, 1), ops, inplace=False)


def put_res_allreduce(n: int) -> dict[str, Any]:
    """Rank r puts chunk p into peer p's scratch slot, then reduces its chunk with the slots (res) and sends
    the sum to every peer's input."""
    def ops(rank: int, peers: list[int]) -> list[list[dict[str, Any]]]:
        puts = [{"name": "put", "channel_type": "memory", "channel_ids": [k], "src_buff": [_local("i", p)],
                 "dst_buff": [_remote(_rid(peers, p, "s"), _peers(p, n).index(rank))]} for k, p in enumerate(peers)]
        res = {"name": "res", "channel_type": "memory",
               "src_buff": [_local("i", rank)] + [_local("s", k) for k in range(n - 1)],
               "dst_buff": [_local("i", rank)] + [_remote(_rid(peers, p, "i"), rank) for p in peers]}
        return [_sync(n) + puts + _sync(n) + [res] + _sync(n)]
    return plan("put_res_allreduce", "allreduce", n, (n, n, n - 1), ops)


def packet_allreduce(n: int, flavour: str) -> dict[str, Any]:
    """One-shot LL AllReduce: chunk p to peer p as packets, reduce the packets with the own chunk, result
    to every peer as packets, unpack. `flavour` picks the ops: "respkt" (ppkt, respkt, upkt) or "recpkt"
    (cpkt + rppkt, recpkt + rppkt, upkt) or "recspkt" (ppkt, recspkt, upkt + upkt of the local copy)."""
    def slot(peer_of: int, sender: int) -> int:  # the slot of `sender` in rank `peer_of`'s scratch
        return _peers(peer_of, n).index(sender)

    def ops(rank: int, peers: list[int]) -> list[list[dict[str, Any]]]:
        inbox = [_local("s", k) for k in range(n - 1)]
        out = []
        if flavour == "recpkt":
            for k, p in enumerate(peers):
                out.append({"name": "cpkt", "src_buff": [_local("i", p)], "dst_buff": [_local("s", 2 * (n - 1) + k)]})
                out.append({"name": "rppkt", "channel_type": "memory", "channel_ids": [k],
                            "src_buff": [_local("s", 2 * (n - 1) + k)],
                            "dst_buff": [_remote(_rid(peers, p, "s"), slot(p, rank))]})
        else:
            out += [{"name": "ppkt", "channel_type": "memory", "channel_ids": [k], "src_buff": [_local("i", p)],
                     "dst_buff": [_remote(_rid(peers, p, "s"), slot(p, rank))]} for k, p in enumerate(peers)]
        results = [_remote(_rid(peers, p, "s"), n - 1 + slot(p, rank)) for p in peers]
        own = _local("s", 3 * (n - 1))
        if flavour == "respkt":
            out.append({"name": "respkt", "channel_type": "memory", "src_buff": [_local("i", rank)] + inbox,
                        "dst_buff": [_local("i", rank)] + results})
        elif flavour == "recpkt":
            out.append({"name": "recpkt", "src_buff": [_local("i", rank)] + inbox,
                        "dst_buff": [_local("i", rank), own]})
            out += [{"name": "rppkt", "channel_type": "memory", "channel_ids": [k], "src_buff": [own],
                     "dst_buff": [results[k]]} for k in range(n - 1)]
        else:
            out.append({"name": "recspkt", "channel_type": "memory", "src_buff": [_local("i", rank)] + inbox,
                        "dst_buff": [_local("o", rank), own] + results})
            out.append({"name": "upkt", "src_buff": [own], "dst_buff": [_local("i", rank)]})
        out += [{"name": "upkt", "src_buff": [_local("s", n - 1 + k)], "dst_buff": [_local("i", p)]}
                for k, p in enumerate(peers)]
        return [out]
    return plan(f"packet_allreduce_{flavour}", "allreduce", n, (n, n, 3 * (n - 1) + 1), ops, protocol="LL")


def barrier_plan(n: int, with_barrier: bool = True, tb0_barrier: bool = True) -> dict[str, Any]:
    """Two threadblocks per rank: tb0 puts chunk 0 into every peer's scratch, signals, waits for the peers'
    puts, then meets tb1 at a barrier; tb1 (barrier first) reduces the peers' chunks from scratch."""
    def ops(rank: int, peers: list[int]) -> list[list[dict[str, Any]]]:
        barrier = [{"name": "barrier", "barrier_id": 3, "num_threadblocks": 2}] if with_barrier else []
        puts = [{"name": "put", "channel_type": "memory", "channel_ids": [k], "src_buff": [_local("i", 0)],
                 "dst_buff": [_remote(_rid(peers, p, "s"), _peers(p, n).index(rank))]} for k, p in enumerate(peers)]
        reduce = {"name": "re", "src_buff": [_local("i", 0)] + [_local("s", k) for k in range(n - 1)],
                  "dst_buff": [_local("o", 0)]}
        return [puts + _sync(n) + (barrier if tb0_barrier else []), barrier + [reduce]]
    return plan("barrier_allreduce", "allreduce", n, (1, 1, n - 1), ops, inplace=False)


def ll_allreduce_with_stash(stash: int) -> dict[str, Any]:
    """Two-rank LL AllReduce that keeps its own chunk as plain data in scratch chunk `stash` while the peer's
    packets land in scratch chunk 1 (bytes of chunks [2, 4): the executor doubles packet offsets) and the
    reduced chunk comes back as packets in scratch chunk 2 (bytes [4, 6)). stash=1 shares packet slot 1's
    index but not its bytes; stash=2 is inside its bytes."""
    def ops(rank: int, peers: list[int]) -> list[list[dict[str, Any]]]:
        peer = peers[0]
        return [[
            {"name": "copy", "src_buff": [_local("i", rank)], "dst_buff": [_local("s", stash)]},
            {"name": "ppkt", "channel_type": "memory", "channel_ids": [0], "src_buff": [_local("i", peer)],
             "dst_buff": [_remote(_rid(peers, peer, "s"), 1)]},
            {"name": "repkt", "src_buff": [_local("s", stash), _local("s", 1)], "dst_buff": [_local("o", rank)],
             "reduce_op": "sum"},
            {"name": "ppkt", "channel_type": "memory", "channel_ids": [0], "src_buff": [_local("o", rank)],
             "dst_buff": [_remote(_rid(peers, peer, "s"), 2)]},
            {"name": "upkt", "src_buff": [_local("s", 2)], "dst_buff": [_local("o", peer)]},
        ]]
    return plan(f"ll_stash_{stash}", "allreduce", 2, (2, 2, 3), ops, protocol="LL", inplace=False)
