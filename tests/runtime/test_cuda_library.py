"""Every compiled library program, flattened for the CUDA kernel and run on its numpy model, gives the CPU
interpreter's buffers bit for bit (compiler output: nops, several dependencies, cnt > 1, scratch, in-place)."""

import numpy as np
import pytest
from runtime_helpers import compiled_library_program

from collsynth.algorithms import LIBRARY
from collsynth.runtime import execute
from collsynth.runtime.cuda import prepare
from collsynth.runtime.cuda.numerics import element_type, random_inputs


def library_cases():
    """Every program x in-place where supported, on 8 fully connected ranks; multi-node ones on 2 nodes of 4."""
    cases = []
    for name, entry in LIBRARY.items():
        num_nodes = 2 if entry.multi_node else 1
        if entry.fits(8, num_nodes) is not None:
            continue
        for inplace in (False, True) if entry.inplace else (False,):
            cases.append(pytest.param(name, num_nodes, inplace, id=f"{name}-{'inplace' if inplace else 'out'}"))
    return cases


@pytest.mark.parametrize("name, num_nodes, inplace", library_cases())
def test_library_program_on_the_kernel_model_matches_the_cpu(name, num_nodes, inplace):
    ir, coll = compiled_library_program(name, num_nodes, inplace)
    etype = element_type("float32")
    inputs = random_inputs(etype, [(coll.input_chunks, 37)] * ir.ngpus, seed=len(name))
    prep = prepare(ir, inputs=inputs, collective=coll, reference="emulator", slot_bytes=64, nslots=2)
    cpu = execute(ir, inputs=inputs, collective=coll, fifo_capacity=2)
    assert cpu.passed, cpu.message
    assert prep.reference_passed, prep.reference_message
    assert prep.flat.ntiles > 1  # pieces of at most 64 bytes per message: several tiles through 2 slots
    for rank, (a, b) in enumerate(zip(prep.reference, cpu.outputs, strict=True)):
        assert np.array_equal(a.view(np.uint32), np.asarray(b).reshape(-1).view(np.uint32)), f"rank {rank}"
