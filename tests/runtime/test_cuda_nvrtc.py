"""The CUDA interpreter kernel compiles with NVRTC, CuPy's compiler, with CuPy's default options (no GPU needed).

NVRTC comes from NVIDIA's pip wheel (`pip install nvidia-cuda-nvrtc-cu12`, pulled in by cupy-cuda12x[ctk]) or a
CUDA toolkit; without one, the compile tests are skipped.
"""

import re

import pytest

from collsynth.core.errors import CollsynthError
from collsynth.runtime.cuda.build import (
    CUPY_NVRTC_OPTIONS,
    NvrtcCompileError,
    NvrtcUnavailableError,
    compile_with_nvrtc,
    find_nvrtc,
    first_error_line,
    kernel_source,
    nvrtc_compile,
)
from collsynth.runtime.cuda.numerics import all_kernel_names

NVRTC = find_nvrtc()
needs_nvrtc = pytest.mark.skipif(
    NVRTC is None, reason="NVRTC (libnvrtc) is not installed: pip install nvidia-cuda-nvrtc-cu12, or set CUDA_PATH")


FTZ_INSTRUCTION = r"\b[a-z]+(?:\.\w+)*\.ftz\b"  # e.g. add.ftz.f32, fma.rn.ftz.f32


def ptx_entries(ptx: str) -> set[str]:
    return set(re.findall(r"\.entry\s+(\w+)\(", ptx))


@pytest.fixture(scope="module", params=["compute_80", "compute_90"])
def compiled(request):
    """(arch, NvrtcOutput) of the kernel compiled to PTX the way CuPy's RawModule(code=...) compiles it."""
    return request.param, nvrtc_compile(kernel_source(), arch=request.param, options=CUPY_NVRTC_OPTIONS)


@needs_nvrtc
def test_kernel_compiles_without_warnings(compiled):
    # NVRTC has no -Werror before CUDA 13 (and then only per kind), so the log must simply be clean.
    arch, output = compiled
    assert "warning" not in output.log.lower(), f"{arch}: {output.log}"
    assert "error" not in output.log.lower(), f"{arch}: {output.log}"


@needs_nvrtc
def test_ptx_exports_every_entry_point_the_backend_launches(compiled):
    arch, output = compiled
    assert f".target sm_{arch.removeprefix('compute_')}" in output.ptx
    assert ptx_entries(output.ptx) == set(all_kernel_names())
    assert len(all_kernel_names()) == 16  # 4 dtypes x 4 ops


@needs_nvrtc
def test_cupy_flush_to_zero_option_does_not_reach_the_reductions(compiled):
    # CuPy always passes -ftz=true; the kernel's float math is inline PTX without .ftz so it stays
    # bit-identical to numpy (which keeps subnormals). Compiler-generated float ops would carry .ftz.
    _, output = compiled
    assert "-ftz=true" in CUPY_NVRTC_OPTIONS
    assert not re.findall(FTZ_INSTRUCTION, output.ptx)


@needs_nvrtc
def test_the_ftz_check_sees_compiler_generated_float_math():
    ptx = compile_with_nvrtc('extern "C" __global__ void k(float *x) { x[0] = x[0] * x[1] + x[2]; }',
                             options=CUPY_NVRTC_OPTIONS)
    assert re.findall(FTZ_INSTRUCTION, ptx)


@needs_nvrtc
def test_kernel_compiles_to_an_sm_90_cubin_as_cupy_does_on_an_h100():
    # With a device NVRTC knows, CuPy asks for -arch=sm_XX: NVRTC then also runs ptxas and returns a cubin.
    output = nvrtc_compile(kernel_source(), arch="sm_90", options=CUPY_NVRTC_OPTIONS)
    assert "warning" not in output.log.lower(), output.log
    assert output.cubin[:4] == b"\x7fELF"
    assert all(name.encode() in output.cubin for name in all_kernel_names())
    assert ptx_entries(output.ptx) == set(all_kernel_names())


@needs_nvrtc
def test_a_broken_source_raises_a_one_line_error_naming_the_problem():
    source = 'extern "C" __global__ void broken(int *out) { out[0] = undefined_name; }'
    with pytest.raises(NvrtcCompileError) as caught:
        compile_with_nvrtc(source, options=CUPY_NVRTC_OPTIONS)
    assert isinstance(caught.value, CollsynthError)
    message = str(caught.value)
    assert "\n" not in message
    assert 'error: identifier "undefined_name" is undefined' in message and "compute_80" in message
    assert "1 error detected" in caught.value.log  # the whole log stays available


@needs_nvrtc
def test_an_unknown_option_is_reported_by_name():
    with pytest.raises(NvrtcCompileError, match="--no-such-option"):
        compile_with_nvrtc('extern "C" __global__ void k() {}', options=("--no-such-option",))


@needs_nvrtc
def test_an_arch_nvrtc_does_not_know_is_an_error():
    with pytest.raises(NvrtcCompileError, match=r"for compute_1: .*invalid value for --gpu-architecture"):
        compile_with_nvrtc('extern "C" __global__ void k() {}', arch="compute_1")


def test_find_nvrtc_takes_the_toolkit_library_not_its_helpers(tmp_path):
    lib64 = tmp_path / "lib64"
    lib64.mkdir()
    for name in ("libnvrtc-builtins.so.12.9", "libnvrtc.alt.so.12", "libnvrtc.so.12.9.86", "libnvrtc.so.12"):
        (lib64 / name).write_bytes(b"")
    assert find_nvrtc({"CUDA_PATH": str(tmp_path)}, pip_packages=False) == str(lib64 / "libnvrtc.so.12")
    assert find_nvrtc({"CUDA_HOME": str(tmp_path)}, pip_packages=False) == str(lib64 / "libnvrtc.so.12")


def test_a_library_that_is_not_nvrtc_is_a_clear_error(tmp_path):
    fake = tmp_path / "libnvrtc.so.12"
    fake.write_bytes(b"not a shared object")
    with pytest.raises(NvrtcUnavailableError, match="cannot load NVRTC from .*pip install nvidia-cuda-nvrtc-cu12"):
        compile_with_nvrtc("", library=str(fake))


def test_first_error_line_skips_warnings_and_echoed_source():
    log = ('k.cu(3): warning #177-D: variable "x" was declared but never referenced\n'
           "  int x;\n\n"
           'k.cu(7): error: identifier "y" is undefined\n  y = 1;\n\n1 error detected in the compilation of "k.cu".\n')
    assert first_error_line(log) == 'k.cu(7): error: identifier "y" is undefined'
    assert first_error_line("") == "(empty log)"
