"""CUDA interpreter backend: runs compiled IR on one GPU, every rank's buffers in its memory.

`execute_cuda(ir, nbytes=..., dtype=...)` (what `collsynth.runtime.execute(ir, backend="cuda")` and
`collsynth run FILE.xml --backend cuda` call) flattens the IR (flatten.py), runs the kernel
(interpreter.cu) through CuPy, checks the outputs bit for bit against the CPU interpreter (or, for
what it lacks, the kernel's numpy model in emulate.py) and times the kernel with CUDA events.
The functions `flatten.flatten` and `emulate.emulate` stay in their modules (re-exporting them would
hide the module names). Importing this package needs no CuPy and no GPU; executing without them
raises CudaUnavailableError ("install the gpu extra: pip install 'collsynth[gpu]'").
"""

from collsynth.runtime.cuda.backend import (
    GPU_EXTRA_HINT,
    CudaRunner,
    CudaUnavailableError,
    Prepared,
    execute_cuda,
    import_cupy,
    prepare,
)
from collsynth.runtime.cuda.emulate import DeadlockError
from collsynth.runtime.cuda.flatten import CudaBackendError, FlatProgram, ResidencyError, check_residency, traffic_bytes
from collsynth.runtime.cuda.numerics import DTYPES, OPS

__all__ = [
    "DTYPES", "GPU_EXTRA_HINT", "OPS", "CudaBackendError", "CudaRunner", "CudaUnavailableError", "DeadlockError",
    "FlatProgram", "Prepared", "ResidencyError", "check_residency", "execute_cuda", "import_cupy", "prepare",
    "traffic_bytes",
]
