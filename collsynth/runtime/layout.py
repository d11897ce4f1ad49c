"""How an IR's chunks map onto real buffers, which collective it computes, and the test inputs.

Shared by the CPU and CUDA backends so that both run the same layout on the same inputs.

Buffers (per rank, as MSCCL lays them out): the user's input buffer holds `input_chunks` chunks of
`chunk_elems` elements each, the output buffer `output_chunks`, the scratch buffer the IR's `s_chunks`.
`nbytes` is the per-rank input buffer size. MSCCL sizes a chunk as (larger user buffer) / nchunksperloop,
so an IR whose nchunksperloop disagrees with the collective's buffers would run on other chunks than it
was compiled for: that is reported as a layout failure.

In-place IRs alias input and output as NCCL defines in-place calls: when both buffers have the same
size they are one buffer; otherwise the smaller one is this rank's slice of the larger, at
rank * (smaller size) (AllGather: input = output[r*C:(r+1)*C]; ReduceScatter: output = input[r*C:...]).

Tiles: MSCCL moves a large buffer through the program in loop iterations, each handling one slice of
every chunk (`tile_elems` elements). Every step touches the same slice of each chunk it names, so
tiles are independent; the default per-protocol tile sizes approximate the slice MSCCL moves per
iteration with NCCL's default connection buffers (Simple: 2 MiB, LL: 32 KiB, LL128: 560 KiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from collsynth.collectives.spec import STANDARD, Collective, canonical_name, custom_collective, make_collective
from collsynth.ir import RECEIVING_TYPES, SENDING_TYPES, Algo
from collsynth.runtime.numerics import NumberFormat, exact_inputs, exact_product_inputs, number_format, reduction_op
from collsynth.runtime.result import ExecutionError

DEFAULT_TILE_BYTES = {"Simple": 2 << 20, "LL": 32 << 10, "LL128": 560 << 10}
DEFAULT_CHUNK_ELEMS = 1024  # when no size is given


def resolve_dtype(dtype: str | np.dtype | type) -> np.dtype:
    """`'float32'` (or a numpy dtype) -> the numpy dtype of its stored bits (bfloat16: uint16); only the dtypes
    the interpreters support (collsynth.runtime.numerics.FORMATS)."""
    return number_format(dtype).storage


# --- which collective an IR computes ----------------------------------------------------------------

def collective_for(ir: Algo, collective: Collective | None = None, root: int | None = None) -> Collective:
    """The collective whose postcondition the IR must meet.

    Given one, it is refined to the IR's chunk count if the IR splits every chunk further (instances).
    Otherwise it is rebuilt from `ir.collective`, `ngpus` and the gpus' i_chunks/o_chunks (the chunk
    factor C follows from the buffer layout, e.g. AllGather C = i_chunks, AllToAll C = i_chunks / ngpus);
    a rooted collective's root is the one rank that never receives (Broadcast, Scatter) or never sends
    (Reduce, Gather) unless `root` is given."""
    n = ir.ngpus
    in_chunks = max((gpu.i_chunks for gpu in ir.gpus), default=0)
    out_chunks = max((gpu.o_chunks for gpu in ir.gpus), default=0)
    if collective is not None:
        return _refine(ir, collective, in_chunks, out_chunks)
    key = canonical_name(ir.collective)
    if key not in STANDARD:
        raise ExecutionError(f"IR collective {ir.collective!r} is not a standard collective; pass its Collective "
                             "(execute(..., collective=...), or --collective FILE.json on the command line)")
    if key == "allreduce" and max(in_chunks, out_chunks) % n:
        size = max(in_chunks, out_chunks)  # MSCCLang's AllReduce: any number of chunks, each summed in place
        slots = [(c, r, c) for c in range(size) for r in range(n)]
        return custom_collective("allreduce", n, slots, slots, combining=True, input_chunks=size, output_chunks=size,
                                 inplace=ir.inplace)
    chunks = _chunk_factor(key, n, in_chunks, out_chunks, ir.collective)
    if STANDARD[key][2]:
        root = _infer_root(ir, key) if root is None else root
    return make_collective(key, n, chunks, root=root, inplace=ir.inplace)


def _chunk_factor(key: str, n: int, in_chunks: int, out_chunks: int, spelling: str) -> int:
    if key in ("allgather", "gather"):
        chunks, total = (in_chunks, in_chunks * n) if in_chunks else (out_chunks // n, out_chunks)
    elif key in ("scatter", "reducescatter"):
        chunks, total = (out_chunks, out_chunks * n) if out_chunks else (in_chunks // n, in_chunks)
    elif key in ("alltoall", "allreduce"):
        total = max(in_chunks, out_chunks)
        chunks = total // n
    else:  # broadcast, reduce: one buffer size
        chunks = total = max(in_chunks, out_chunks)
    if chunks < 1 or (key in ("alltoall", "allreduce") and total % n):
        raise ExecutionError(f"cannot derive the chunk factor of {spelling} on {n} ranks from i_chunks={in_chunks}, "
                             f"o_chunks={out_chunks}; pass the Collective explicitly")
    return chunks


def _infer_root(ir: Algo, key: str) -> int:
    never = SENDING_TYPES if key in ("reduce", "gather") else RECEIVING_TYPES
    candidates = [gpu.id for gpu in ir.gpus
                  if not any(step.type in never for tb in gpu.tbs for step in tb.steps)]
    if len(candidates) != 1:
        role = "sends" if key in ("reduce", "gather") else "receives"
        raise ExecutionError(f"cannot tell the root of this {key}: ranks {candidates} never {role}; pass root= "
                             "(--root on the command line)")
    return candidates[0]


def _refine(ir: Algo, collective: Collective, in_chunks: int, out_chunks: int) -> Collective:
    if collective.num_ranks != ir.ngpus:
        raise ExecutionError(f"the collective {collective} is for {collective.num_ranks} ranks but the IR has "
                             f"{ir.ngpus} gpus")
    if collective.inplace != ir.inplace:
        collective = collective.with_inplace(ir.inplace)
    if in_chunks <= collective.input_chunks or collective.input_chunks == 0:
        return collective
    factor, rest = divmod(in_chunks, collective.input_chunks)
    if rest or collective.name not in STANDARD:
        raise ExecutionError(f"the IR's input buffer has {in_chunks} chunks but {collective} has "
                             f"{collective.input_chunks}; pass a collective with the IR's chunking")
    return collective.with_chunks(collective.chunks * factor)


# --- buffer layout ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class BufferLayout:
    """Per-rank buffer sizes (in chunks), chunk and tile size (in elements), and in-place aliasing."""

    ngpus: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: tuple[int, ...]
    chunk_elems: int
    tile_elems: int
    inplace: bool

    @property
    def tiles(self) -> int:
        return -(-self.chunk_elems // self.tile_elems)

    @property
    def storage_chunks(self) -> int:
        """Chunks of the one aliased buffer of an in-place IR."""
        return max(self.input_chunks, self.output_chunks)

    def input_offset(self, rank: int) -> int:
        """Where the input starts in the aliased buffer (in-place only), in chunks."""
        return rank * self.input_chunks if self.input_chunks < self.output_chunks else 0

    def output_offset(self, rank: int) -> int:
        return rank * self.output_chunks if self.output_chunks < self.input_chunks else 0

    def __str__(self) -> str:
        alias = " in-place" if self.inplace else ""
        return (f"layout{alias}: input {self.input_chunks} x output {self.output_chunks} chunks of {self.chunk_elems} "
                f"elements, {self.tiles} tile(s) of {self.tile_elems}")


def plan_layout(ir: Algo, collective: Collective | None, nbytes: int | None, dtype: np.dtype | NumberFormat,
                tile_bytes: int | None = None) -> BufferLayout:
    """Chunk size from the per-rank input size; buffer sizes from the collective (or the IR without one).
    `dtype`: anything with an `itemsize` and a `name` (a numpy dtype or a NumberFormat)."""
    in_chunks = collective.input_chunks if collective else max(gpu.i_chunks for gpu in ir.gpus)
    out_chunks = collective.output_chunks if collective else max(gpu.o_chunks for gpu in ir.gpus)
    if in_chunks < 1:
        raise ExecutionError("the IR has no input chunks (i_chunks=0 on every gpu); nothing to size the buffers by")
    itemsize = dtype.itemsize
    if nbytes is None:
        chunk_elems = DEFAULT_CHUNK_ELEMS
    else:
        step = in_chunks * itemsize
        if nbytes < step or nbytes % step:
            lower = max(step, nbytes // step * step)
            raise ExecutionError(f"size {nbytes} bytes does not split into {in_chunks} input chunks of whole "
                                 f"{dtype.name} elements; use a multiple of {step} bytes (e.g. {lower})")
        chunk_elems = nbytes // step
    tile = DEFAULT_TILE_BYTES.get(ir.proto, DEFAULT_TILE_BYTES["Simple"]) if tile_bytes is None else tile_bytes
    if tile < itemsize:
        raise ExecutionError(f"tile size {tile} bytes is smaller than one {dtype.name} element")
    return BufferLayout(ngpus=ir.ngpus, input_chunks=in_chunks, output_chunks=out_chunks,
                        scratch_chunks=tuple(gpu.s_chunks for gpu in ir.gpus), chunk_elems=chunk_elems,
                        tile_elems=min(chunk_elems, tile // itemsize), inplace=ir.inplace)


def layout_problem(ir: Algo, layout: BufferLayout) -> str | None:
    """Why MSCCL would cut this IR's chunks differently from the layout, or None."""
    larger = max(layout.input_chunks, layout.output_chunks)
    if ir.nchunksperloop != larger:
        return (f"nchunksperloop={ir.nchunksperloop} but the larger user buffer holds {larger} chunks; MSCCL cuts "
                f"chunks of (buffer / nchunksperloop) elements, so the IR would address other data than compiled for")
    return None


# --- inputs ------------------------------------------------------------------------------------------

def make_inputs(layout: BufferLayout, dtype: np.dtype | NumberFormat | str, seed: int = 0,
                op: str = "sum") -> list[np.ndarray]:
    """Random per-rank inputs of shape (input_chunks, chunk_elems), as stored bits (bfloat16: uint16).

    Values are small multiples of a power of two, so every sum of up to `ngpus` of them is exact in any
    order: reductions can be compared bit-exactly whatever order an algorithm adds in. For op="prod" on a
    float type they are short-mantissa values whose products are exact (numerics.exact_product_inputs);
    max and min are exact on any inputs. int32 values are small integers (sum and prod wrap modulo 2**32
    on every backend, which is exact in any order too)."""
    fmt = number_format(dtype)
    shape = (layout.input_chunks, layout.chunk_elems)
    n = max(1, layout.ngpus)
    if fmt.is_float and reduction_op(op) == "prod":
        return exact_product_inputs(fmt, n, shape, seed)
    if not fmt.is_float:
        rng = np.random.default_rng(seed)
        return [rng.integers(-1000, 1001, size=shape, dtype=np.int32).astype(fmt.storage) for _ in range(n)]
    return exact_inputs(fmt, n, shape, seed)


def coerce_inputs(layout: BufferLayout, dtype: np.dtype, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """User-given per-rank inputs (flat or (chunks, elems)) as (input_chunks, chunk_elems) arrays of dtype."""
    if len(inputs) != layout.ngpus:
        raise ExecutionError(f"got inputs for {len(inputs)} ranks; the IR has {layout.ngpus}")
    want = layout.input_chunks * layout.chunk_elems
    result = []
    for rank, array in enumerate(inputs):
        flat = np.asarray(array).reshape(-1)
        if flat.size != want:
            raise ExecutionError(f"input of rank {rank} has {flat.size} elements; expected {want} "
                                 f"({layout.input_chunks} chunks of {layout.chunk_elems})")
        result.append(flat.astype(dtype, copy=True).reshape(layout.input_chunks, layout.chunk_elems))
    return result


def input_nbytes(inputs: Sequence[np.ndarray], dtype: np.dtype) -> int:
    """The per-rank input size in bytes implied by user-given inputs."""
    return int(np.asarray(inputs[0]).size) * dtype.itemsize if len(inputs) else 0
