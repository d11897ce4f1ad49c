# ruff: noqa: F403, F405  (MSCCLang programs use star imports)
# An all-pairs AllReduce in MSCCLang style: every rank gathers its share of every other rank into a
# named scratch buffer, reduces it locally chunk by chunk, and sends the result back to all ranks.
import argparse

from collsynth.language import *
from collsynth.language.collectives import AllReduce
from collsynth.topologies import *


def allpairs(num_gpus, instances):
    n = num_gpus
    with MSCCLProgram("allpairs_allreduce", fully_connected(n), AllReduce(n, n * n, False), instances,
                      protocol="LL", interleaved_replication=False):
        for owner in range(n):
            for peer in range(n):
                if peer != owner:
                    block = chunk(peer, Buffer.input, owner * n, size=n)
                    block.copy(owner, "gathered")
        for owner in range(n):
            # the owner's own share goes to its output first, then every peer's share is added
            chunk(owner, Buffer.input, owner * n, n).copy(owner, Buffer.output, owner * n)
            for k in range(n * (n - 1)):
                mine = chunk(owner, Buffer.output, owner * n + k % n)
                mine.reduce(chunk(owner, "gathered", k))
        for owner in range(n):
            result = chunk(owner, Buffer.output, owner * n, n)
            for peer in range(n):
                if peer != owner:
                    result.copy(peer, Buffer.output, owner * n)
        XML()
        print(Check())


parser = argparse.ArgumentParser()
parser.add_argument("num_gpus", type=int)
parser.add_argument("instances", type=int)
args = parser.parse_args()
allpairs(args.num_gpus, args.instances)
