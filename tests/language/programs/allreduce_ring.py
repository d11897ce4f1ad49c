# ruff: noqa: F403, F405  (MSCCLang programs use star imports)
# A ring AllReduce in MSCCLang style: a reduce-scatter pass around the ring followed by an allgather
# pass, with the chunks spread over `channels` threadblocks/channels placed by hand.
import argparse

from collsynth.language import *
from collsynth.language.collectives import AllReduce
from collsynth.topologies import *


def ring_allreduce(num_gpus, channels, instances, protocol):
    collective = AllReduce(num_gpus, num_gpus, True)
    with MSCCLProgram(f"ring_allreduce_{channels}ch", ring(num_gpus), collective, instances, protocol=protocol,
                      threadblock_policy=ThreadblockPolicy.manual):
        for chunk_id in range(num_gpus):
            tb = chunk_id % channels
            # reduce-scatter: the partial sum of chunk `chunk_id` walks the ring and ends on its owner
            owner = (chunk_id + num_gpus - 1) % num_gpus
            partial = chunk(chunk_id, Buffer.input, chunk_id)
            for hop in range(1, num_gpus):
                here = (chunk_id + hop) % num_gpus
                partial = chunk(here, Buffer.input, chunk_id).reduce(partial, sendtb=tb, recvtb=tb, ch=tb)
            # allgather: the owner's full sum walks on around the ring
            total = partial
            for hop in range(1, num_gpus):
                total = total.copy((owner + hop) % num_gpus, Buffer.input, chunk_id, sendtb=tb, recvtb=tb, ch=tb)
        XML()
        print(Check())


parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int)
parser.add_argument("channels", type=int)
parser.add_argument("instances", type=int)
parser.add_argument("--protocol", default="LL128", choices=["Simple", "LL", "LL128"])
args = parser.parse_args()
ring_allreduce(args.num_gpus, args.channels, args.instances, args.protocol)
