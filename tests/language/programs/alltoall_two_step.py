# ruff: noqa: F403, F405  (MSCCLang programs use star imports)
# A two-step AllToAll for several nodes in MSCCLang style: chunks for a remote node are first gathered
# on the GPU with the same local index (named scratch buffer per remote node), then cross nodes in one
# aggregated transfer; chunks for the own node go directly. Uses get_dst_rank/get_dst_index.
import argparse

from collsynth.language import *
from collsynth.language.collectives import AllToAll
from collsynth.topologies import *


def two_step(num_nodes, gpus_per_node):
    n = num_nodes * gpus_per_node
    with MSCCLProgram("alltoall_two_step", fully_connected(n), AllToAll(n, 1, inplace=False), 1):
        for node in range(num_nodes):
            for other in range(num_nodes):
                if other == node:
                    continue
                for g in range(gpus_per_node):
                    rank = node * gpus_per_node + g
                    for g2 in range(gpus_per_node):
                        # the chunk rank sends to GPU g2 of the other node, parked on local GPU g2
                        c = chunk(rank, Buffer.input, other * gpus_per_node + g2)
                        c.copy(node * gpus_per_node + g2, f"to_node{other}", index=g)
            for other in range(num_nodes):
                if other == node:
                    continue
                for g in range(gpus_per_node):
                    rank = node * gpus_per_node + g
                    block = chunk(rank, f"to_node{other}", 0, gpus_per_node)
                    block.copy(other * gpus_per_node + g, Buffer.output, node * gpus_per_node, ch=1)
        for rank in range(n):
            node = rank // gpus_per_node
            for g in range(gpus_per_node):
                c = chunk(rank, Buffer.input, node * gpus_per_node + g)
                c.copy(c.get_dst_rank(), Buffer.output, c.get_dst_index())
        XML()
        print(Check())


parser = argparse.ArgumentParser()
parser.add_argument("num_nodes", type=int)
parser.add_argument("gpus_per_node", type=int)
args = parser.parse_args()
two_step(args.num_nodes, args.gpus_per_node)
