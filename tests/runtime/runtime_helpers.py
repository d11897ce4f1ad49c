"""Shared pieces for the runtime tests: library programs compiled for 8 fully connected ranks."""

from __future__ import annotations

from collsynth.algorithms import LIBRARY, suggested_parameters
from collsynth.compiler import compile_program
from collsynth.ir import Algo
from collsynth.runtime.layout import collective_for
from collsynth.topologies.library import fully_connected


def compiled_library_program(name: str, num_nodes: int, inplace: bool, ranks: int = 8) -> tuple[Algo, object]:
    """Library program `name` on `ranks` fully connected ranks (multi-node ones split into `num_nodes`),
    compiled, with the collective its buffers follow."""
    topology = fully_connected(ranks)
    entry = LIBRARY[name]
    params = suggested_parameters(entry, topology)
    if entry.multi_node:
        params["num_nodes"] = num_nodes
    if entry.inplace:
        params["inplace"] = inplace
    program = entry.builder(topology, **params)
    ir = compile_program(program)
    return ir, collective_for(ir, program.collective) if ir.collective == "custom" else collective_for(ir)
