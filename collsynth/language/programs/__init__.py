"""MSCCLang's registered programs (`msccl.programs.*`), written for collsynth's DSL with the same module names,
function names and signatures. Each function adds ops to the open `MSCCLProgram`:

    allreduce_a100_ring.allreduce_ring(size, channels)
    allreduce_allpairs.allreduce_allpairs(size)
    alltoall_a100_8kp1.alltoall_three_step(num_nodes, gpus_per_node, instances=1, ib_connections=1)
    alltoall_a100_yifan.alltoall_hierarchical(num_nodes, gpus_per_node)

An MSCCLang script importing `msccl.programs.X` runs with `collsynth.language.programs.X`.
"""

from collsynth.language.programs.allreduce_a100_ring import allreduce_ring
from collsynth.language.programs.allreduce_allpairs import allreduce_allpairs
from collsynth.language.programs.alltoall_a100_8kp1 import alltoall_three_step
from collsynth.language.programs.alltoall_a100_yifan import alltoall_hierarchical

__all__ = ["allreduce_allpairs", "allreduce_ring", "alltoall_hierarchical", "alltoall_three_step"]
