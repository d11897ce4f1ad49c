"""Broadcast in MSCCL++'s DSL: the root puts its chunks into every peer's output, one threadblock per peer.

Simple: `put` then `signal`, and the peer `wait`s. LL: `put_packet` into the peer's scratch, which the peer
unpacks into its output (`copy_packet`); packets carry their own flags, so no signal. Out of place, the root
also copies its input to its own output.

    python -m collsynth.language.mscclpplang.examples.broadcast 8 1 --root 3 --protocol LL
"""

from __future__ import annotations

import argparse
from typing import Any

from collsynth.language.mscclpplang import Check, Json, MSCCLPPProgram, chunk
from collsynth.language.mscclpplang.buffer import Buffer
from collsynth.language.mscclpplang.collectives import Broadcast


def _held(rank: int, buffer: Any, index: int, size: int) -> Any:
    """chunk() of data the program has put there (an MSCCL++ Ref; chunk() is typed as MSCCLang's)."""
    ref: Any = chunk(rank, buffer, index, size)
    assert ref is not None
    return ref


def broadcast(num_gpus: int, instances: int, root: int = 0, protocol: str = "Simple", inplace: bool = False,
              chunk_factor: int = 1) -> bool:
    """Print the plan (Json()) and return Check()."""
    collective = Broadcast(num_gpus, chunk_factor, inplace, root)
    with MSCCLPPProgram("broadcast", collective, num_gpus, instances, protocol=protocol,
                        use_double_scratch_buffer=protocol == "LL"):
        data = _held(root, Buffer.input, 0, chunk_factor)
        peers = [r for r in range(num_gpus) if r != root]
        if not inplace:
            data.copy(root, Buffer.output, 0, sendtb=len(peers))
        for tb, peer in enumerate(peers):
            if protocol == "LL":
                data.put_packet(peer, "scratch", 0, sendtb=tb)
                _held(peer, "scratch", 0, chunk_factor).copy_packet(peer, Buffer.output, 0, sendtb=0)
            else:
                data.put(peer, Buffer.output, 0, sendtb=tb)
                data.signal(peer, Buffer.output, 0, sendtb=tb)
                _held(peer, Buffer.output, 0, chunk_factor).wait(root, Buffer.input, 0, recvtb=0)
        Json()
        return bool(Check())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("num_gpus", type=int)
    parser.add_argument("instances", type=int)
    parser.add_argument("--root", type=int, default=0)
    parser.add_argument("--protocol", choices=("Simple", "LL"), default="Simple")
    parser.add_argument("--inplace", action="store_true")
    parser.add_argument("--chunk-factor", type=int, default=1)
    args = parser.parse_args()
    broadcast(args.num_gpus, args.instances, args.root, args.protocol, args.inplace, args.chunk_factor)


if __name__ == "__main__":
    main()
