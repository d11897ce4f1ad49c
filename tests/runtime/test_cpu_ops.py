"""The CPU interpreter with every reduction op (sum, prod, max, min) and dtype (float32, float16, bfloat16, int32,
float64): against direct numpy reductions, against the CUDA kernel's numpy model bit for bit, its postcondition
check, and `collsynth run --op/--dtype`."""

from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from runtime_helpers import compiled_library_program

from collsynth.cli import main
from collsynth.emit.msccl_xml import write_xml
from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.runtime import execute, samples
from collsynth.runtime.cuda import prepare
from collsynth.runtime.layout import ExecutionError, collective_for
from collsynth.runtime.numerics import (
    REDUCTION_OPS,
    as_values,
    bf16_to_float32,
    float32_to_bf16,
    number_format,
    random_inputs,
)
from collsynth.runtime.result import MISMATCH

DTYPES = ("float32", "float16", "bfloat16", "int32", "float64")
NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def chain_allreduce(order: list[int], cnt: int) -> Algo:
    """AllReduce of `cnt` chunks along a chain in rank order `order`: order[0] sends its input, each next rank
    reduces what it receives with its own input and sends it on (so the result is a left fold in `order`), the
    last rank keeps it and sends it back down the chain, every rank copying it to its output."""
    n = len(order)
    gpus = {}
    for pos, rank in enumerate(order):
        prev = order[pos - 1] if pos > 0 else -1
        nxt = order[pos + 1] if pos < n - 1 else -1
        if pos == 0:
            tbs = (Threadblock(0, nxt, -1, 0, (Step(0, "s", "i", 0, "i", 0, cnt),)),
                   Threadblock(1, -1, nxt, 0, (Step(0, "r", "o", 0, "o", 0, cnt),)))
        elif pos == n - 1:
            tbs = (Threadblock(0, prev, prev, 0, (Step(0, "rrcs", "i", 0, "o", 0, cnt),)),)
        else:
            tbs = (Threadblock(0, nxt, prev, 0, (Step(0, "rrs", "i", 0, "i", 0, cnt),)),
                   Threadblock(1, prev, nxt, 0, (Step(0, "rcs", "o", 0, "o", 0, cnt),)))
        gpus[rank] = Gpu(rank, cnt, cnt, 0, tbs)
    return Algo(f"chain_{'_'.join(map(str, order))}x{cnt}", "allreduce", "Simple", 1, cnt, n, False,
                tuple(gpus[r] for r in range(n)))


def fold(values: list[np.ndarray], dtype: str, op: str) -> np.ndarray:
    """Left fold with numpy's own operator, one rounding per step (bfloat16: in float32, then rounded)."""
    fn = NUMPY_OPS[op]
    acc = values[0]
    for x in values[1:]:
        acc = float32_to_bf16(fn(bf16_to_float32(acc), bf16_to_float32(x))) if dtype == "bfloat16" else fn(acc, x)
    return acc


def bits(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array).reshape(-1)
    return array.view(np.dtype(f"u{array.dtype.itemsize}"))


@given(order=st.integers(2, 6).flatmap(lambda n: st.permutations(list(range(n)))), cnt=st.integers(1, 3),
       elems=st.integers(1, 24), op=st.sampled_from(REDUCTION_OPS), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 2**16))
def test_a_random_chain_computes_the_numpy_fold_in_its_order(order, cnt, elems, op, dtype, seed):
    # Random (rounding) inputs: the result must be numpy's fold in the chain's order, bit for bit.
    inputs = random_inputs(dtype, [(cnt, elems)] * len(order), seed)
    result = execute(chain_allreduce(order, cnt), inputs=inputs, dtype=dtype, op=op)
    assert result.passed, result.message
    assert result.dtype == dtype and result.op == op
    expected = fold([inputs[r] for r in order], dtype, op)
    for out in result.outputs:
        assert np.array_equal(bits(out), bits(expected))


SAMPLES = {
    "ring": lambda n: samples.ring_allreduce(n),
    "ring_2ch_inplace": lambda n: samples.ring_allreduce(n, channels=2, inplace=True),
    "ring_unfused": lambda n: samples.ring_allreduce(n, fused=False),
    "via_scratch": samples.allreduce_via_scratch,
}


@given(name=st.sampled_from(sorted(SAMPLES)), n=st.integers(2, 8), op=st.sampled_from(REDUCTION_OPS),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_generated_inputs_reduce_exactly_to_the_numpy_reduction(name, n, op, dtype, seed):
    # The generated inputs make every reduction exact, so any order gives numpy's reduction over the ranks.
    ir = SAMPLES[name](n)
    fmt = number_format(dtype)
    chunks = ir.nchunksperloop
    result = execute(ir, nbytes=chunks * 8 * fmt.itemsize, dtype=dtype, op=op, seed=seed)
    assert result.passed, result.message
    assert "exactly" in result.message
    stacked = np.stack([as_values(fmt, x) for x in result.inputs])
    if fmt.name == "int32":
        expected = NUMPY_OPS[op].reduce(stacked, axis=0, dtype=np.int32)
    else:
        expected = NUMPY_OPS[op].reduce(stacked.astype(np.float64), axis=0)  # exact inputs: exact in float64 too
    for out in result.outputs:
        np.testing.assert_array_equal(as_values(fmt, out).astype(expected.dtype), expected)


@pytest.mark.parametrize("op", ["prod", "max", "min"])
def test_int32_prod_max_min_are_exact_and_prod_wraps(op):
    n = 8
    big = [np.full(2 * n, 1000 + r, dtype=np.int32) for r in range(n)]  # a product far beyond 2**31
    result = execute(samples.ring_allreduce(n), inputs=big, dtype="int32", op=op)
    assert result.passed and result.message.endswith(f"match exactly ({op})"), result.message
    exact = {"prod": int(np.prod([1000 + r for r in range(n)], dtype=object)), "max": 1000 + n - 1, "min": 1000}[op]
    wrapped = (exact + 2**31) % 2**32 - 2**31
    for out in result.outputs:
        assert out.tolist() == [wrapped] * 2 * n


LIBRARY_CASES = {  # name: (nodes, inplace)
    "ring_allreduce": (1, True), "allpairs_allreduce_two_phase": (1, False),
    "double_binary_tree_allreduce": (1, False), "ring_reducescatter": (1, False), "hierarchical_allreduce": (2, False),
}
HAND_CASES = {
    "ring_5x2_inplace": lambda: samples.ring_allreduce(5, channels=2, inplace=True),
    "via_scratch_4": lambda: samples.allreduce_via_scratch(4),
    "chain_2031x2": lambda: chain_allreduce([2, 0, 3, 1], 2),
}


@cache
def compiled(name: str) -> tuple[Algo, object]:
    """A hand-built IR, or a library program compiled for 8 fully connected ranks, with its collective."""
    if name in HAND_CASES:
        ir = HAND_CASES[name]()
        return ir, collective_for(ir)
    return compiled_library_program(name, *LIBRARY_CASES[name])


@pytest.mark.parametrize("name", [*HAND_CASES, *LIBRARY_CASES])
def test_cpu_matches_the_kernel_model_bit_for_bit_for_every_dtype_and_op(name):
    # Random inputs (sums and products round): the same IR step order gives the same bits on both.
    ir, coll = compiled(name)
    for d, dtype in enumerate(("float32", "float16", "bfloat16", "int32")):
        for o, op in enumerate(REDUCTION_OPS):
            inputs = random_inputs(dtype, [(coll.input_chunks, 11)] * ir.ngpus, seed=10 * d + o)
            prep = prepare(ir, inputs=inputs, collective=coll, dtype=dtype, op=op, reference="emulator",
                           slot_bytes=16, nslots=2)
            cpu = execute(ir, inputs=inputs, collective=coll, dtype=dtype, op=op, fifo_capacity=2)
            assert prep.flat is not None and prep.reference_failure in (None, MISMATCH), prep.reference_message
            assert cpu.passed, (dtype, op, cpu.message)
            if op in ("max", "min") or dtype == "int32":
                assert "exactly" in cpu.message, (dtype, op, cpu.message)
            for rank, (a, b) in enumerate(zip(prep.reference, cpu.outputs, strict=True)):
                assert np.array_equal(bits(a), bits(b)), (dtype, op, rank)


def test_bfloat16_runs_on_generated_inputs_and_matches_the_kernel_model():
    ir = samples.ring_allreduce(4)
    for op in REDUCTION_OPS:
        cpu = execute(ir, nbytes=4 * 64 * 2, dtype="bf16", op=op, seed=3)
        assert cpu.passed and "exactly" in cpu.message, cpu.message
        assert cpu.dtype == "bfloat16" and cpu.nbytes == 512 and cpu.outputs[0].dtype == np.uint16
        assert f"dtype=bfloat16{'  op=' + op if op != 'sum' else ''}  time=" in cpu.verdict()
        prep = prepare(ir, inputs=list(cpu.inputs), dtype="bfloat16", op=op, reference="emulator")
        for a, b in zip(prep.reference, cpu.outputs, strict=True):
            assert np.array_equal(a, b)


def test_bfloat16_numbers_as_inputs_are_rounded_to_bfloat16():
    values = [np.array([1.0, 1 + 2**-9, -3.0, 0.1] * 2, dtype=np.float32) for _ in range(2)]
    result = execute(samples.ring_allreduce(2), inputs=values, dtype="bfloat16", op="max")
    assert result.passed, result.message
    assert bf16_to_float32(result.outputs[0]).tolist()[:3] == [1.0, 1.0, -3.0]


def test_float_prod_is_exact_on_generated_inputs_and_within_rounding_on_given_ones():
    ir = samples.ring_allreduce(8)
    for dtype in ("float16", "float32", "bfloat16"):
        result = execute(ir, nbytes=8 * 32 * number_format(dtype).itemsize, dtype=dtype, op="prod", seed=1)
        assert result.passed and result.message.endswith("match exactly (prod)"), result.message
        assert len({float(v) for v in as_values(dtype, result.outputs[0])}) > 8  # not just +-1
    rng = np.random.default_rng(2)
    given_inputs = [rng.uniform(0.5, 2.0, 8 * 16).astype(np.float32) for _ in range(8)]
    result = execute(ir, inputs=given_inputs, op="prod")
    assert result.passed and "within rounding" in result.message, result.message
    np.testing.assert_allclose(result.outputs[3], np.prod(given_inputs, axis=0), rtol=1e-5)


def test_max_with_infinities_and_nans_matches():
    inputs = [np.array([np.inf, 1.0, np.nan, -np.inf] * 2, dtype=np.float32),
              np.array([0.0, -np.inf, 2.0, -np.inf] * 2, dtype=np.float32)]
    result = execute(samples.ring_allreduce(2), inputs=inputs, op="max")
    assert result.passed, result.message
    assert result.outputs[1][:2].tolist() == [np.inf, 1.0] and np.isnan(result.outputs[1][2])


def _drop_one_contribution(ir: Algo) -> Algo:
    """Rank 1's first reduce-and-send becomes a plain forward: one contribution is lost."""
    gpu = ir.gpus[1]
    tb = gpu.tbs[0]
    steps = tuple(replace(s, type="rcs") if s.type == "rrs" and s.s == 1 else s for s in tb.steps)
    return replace(ir, gpus=(ir.gpus[0], replace(gpu, tbs=(replace(tb, steps=steps),)), *ir.gpus[2:]))


@pytest.mark.parametrize("dtype, op", [("int32", "max"), ("bfloat16", "min"), ("float16", "prod")])
def test_a_lost_contribution_is_a_mismatch_for_every_op(dtype, op):
    result = execute(_drop_one_contribution(samples.ring_allreduce(4)), nbytes=4 * 32 * 4, dtype=dtype, op=op)
    assert not result.passed and result.failure == MISMATCH
    noun = {"max": "maximum", "min": "minimum", "prod": "product"}[op]
    assert f"output chunks are wrong ({op}); first: rank" in result.message
    assert f"should hold the {noun} of chunk" in result.message


def test_bad_op_and_dtype_are_refused_with_the_choices():
    with pytest.raises(ExecutionError, match=r"reduction op 'avg' is not supported; use one of sum, prod, max, min"):
        execute(samples.ring_allreduce(2), op="avg")
    with pytest.raises(ExecutionError, match=r"dtype 'complex64' is not supported; use one of float32"):
        execute(samples.ring_allreduce(2), dtype="complex64")


def test_cli_op_and_dtype(cli_runner, tmp_path):
    path = write_xml(samples.ring_allreduce(4), tmp_path / "ring.xml")
    result = cli_runner.invoke(main, ["run", str(path), "--size", "4KB", "--op", "max", "--dtype", "bf16"])
    assert result.exit_code == 0, result.output
    assert "PASS  AllReduce  ngpus=4  size=4KB  dtype=bfloat16  op=max  time=" in result.output
    result = cli_runner.invoke(main, ["run", str(path), "--size", "4KB", "--op", "PROD", "--dtype", "int32"])
    assert result.exit_code == 0 and "dtype=int32  op=prod" in result.output, result.output
    for args, message in [(["--op", "avg"], "error: reduction op 'avg' is not supported; use one of sum, prod, max, "
                                            "min"),
                          (["--dtype", "int8"], "error: dtype 'int8' is not supported; use one of float32, float16, "
                                                "bfloat16, float64, int32"),
                          (["--backend", "cuda", "--dtype", "float64"], "error: dtype 'float64' is not supported by "
                                                                        "the CUDA backend")]:
        result = cli_runner.invoke(main, ["run", str(path), *args])
        assert result.exit_code == 2, result.output
        assert result.output.strip().startswith(message), result.output
        assert len(result.output.strip().splitlines()) == 1
    result = cli_runner.invoke(main, ["run", "--help"])
    assert "[sum|prod|max|min]" in result.output
    assert "[float32|float16|bfloat16|float64|int32]" in result.output
