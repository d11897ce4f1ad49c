"""The hand-written algorithm library, as DSL programs (DESIGN.md, "algorithms/").

Each program is a function `builder(topology, *, instances=1, protocol="Simple", inplace=False, ...)`
returning the DSL's `Program`, built with the DSL's explicit builder. `LIBRARY` maps each name to its
`LibraryEntry` (builder, collective, parameters, valid rank counts, description); `library_programs`
builds every program that fits a topology, for the catalog and the regression suite.
"""

from collsynth.algorithms._common import AlgorithmError, binary_tree_parents, find_ring, node_layout
from collsynth.algorithms.allpairs import allpairs_allreduce_one_phase, allpairs_allreduce_two_phase, allpairs_alltoall
from collsynth.algorithms.alltonext import alltonext
from collsynth.algorithms.hierarchical import hierarchical_allreduce, three_step_alltoall, two_step_alltoall
from collsynth.algorithms.recursive import recursive_doubling_allgather, recursive_halving_doubling_allreduce
from collsynth.algorithms.registry import (
    LIBRARY,
    LibraryEntry,
    build,
    library_entry,
    library_programs,
    suggested_parameters,
)
from collsynth.algorithms.ring import ring_allgather, ring_allreduce, ring_reducescatter
from collsynth.algorithms.trees import (
    binomial_tree_allreduce,
    binomial_tree_parents,
    double_binary_tree_allreduce,
    double_binary_trees,
)

__all__ = [
    "LIBRARY", "AlgorithmError", "LibraryEntry", "allpairs_allreduce_one_phase", "allpairs_allreduce_two_phase",
    "allpairs_alltoall", "alltonext", "binary_tree_parents", "binomial_tree_allreduce", "binomial_tree_parents",
    "build", "double_binary_tree_allreduce", "double_binary_trees", "find_ring", "hierarchical_allreduce",
    "library_entry", "library_programs", "node_layout", "recursive_doubling_allgather",
    "recursive_halving_doubling_allreduce", "ring_allgather", "ring_allreduce", "ring_reducescatter",
    "suggested_parameters", "three_step_alltoall", "two_step_alltoall",
]
