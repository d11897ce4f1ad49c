"""Reading an IR for a command that does not run it (sim, export): the same checks the interpreter makes.

`read_runnable_ir(path)` reads and validates the XML (`read_xml`), then runs it once on the reference
interpreter without the postcondition, so an IR the interpreter refuses (a send without a matching receive,
an nchunksperloop that does not cut the buffers the IR addresses, a deadlock) is refused here too, in one line.
"""

from __future__ import annotations

import os

from collsynth.ir import Algo
from collsynth.ir.validate import IRError


def read_runnable_ir(path: str | os.PathLike[str]) -> Algo:
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.runtime.cpu import execute_cpu
    from collsynth.runtime.layout import collective_for

    ir = read_xml(path)
    try:
        collective = collective_for(ir)
    except IRError:
        raise
    except Exception:  # a user-defined collective: no postcondition here, the program is still run
        collective = None
    # one element per chunk: the checks are about structure, not data
    nbytes = 4 * (collective.input_chunks if collective else max(gpu.i_chunks for gpu in ir.gpus) or 1)
    result = execute_cpu(ir, nbytes=nbytes, collective=collective, postcondition=False)
    if not result.passed:
        raise IRError(f"{path}: the reference interpreter refuses this IR ({result.failure}): {result.message}")
    return ir
