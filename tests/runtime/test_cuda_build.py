"""The CUDA interpreter kernel compiles for sm_80 and sm_90 with every warning an error (needs nvcc, no GPU)."""

import re

import pytest

from collsynth.runtime.cuda.build import STRICT_FLAGS, find_nvcc, kernel_source, nvcc_command, nvcc_compile
from collsynth.runtime.cuda.numerics import all_kernel_names

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (the CUDA toolkit compiles the kernel)")


@pytest.fixture(scope="module", params=["sm_80", "sm_90"])
def compiled(request, tmp_path_factory):
    """(arch, nvcc log, kept PTX text) of one strict compile."""
    work = tmp_path_factory.mktemp(request.param)
    done = nvcc_compile(request.param, work / "interpreter.o", NVCC, extra=("--keep", "--keep-dir", str(work)))
    assert done.returncode == 0, done.stdout + done.stderr
    ptx = next(work.glob("*.ptx")).read_text()
    return request.param, done.stdout + done.stderr, ptx


@needs_nvcc
def test_kernel_compiles_without_warnings(compiled):
    arch, log, _ = compiled
    assert "warning" not in log.lower(), f"{arch}: {log}"


@needs_nvcc
def test_kernel_exports_every_entry_point_the_loader_asks_for(compiled):
    _, _, ptx = compiled
    entries = set(re.findall(r"\.entry\s+(\w+)\(", ptx))
    assert entries == set(all_kernel_names())
    assert len(entries) == 16  # 4 dtypes x 4 ops


def test_strict_flags_turn_every_warning_kind_into_an_error():
    command = nvcc_command("sm_90", "x.o")  # type: ignore[arg-type]
    assert "--Werror" in command and "all-warnings" in command
    assert "-Wall,-Wextra,-Werror" in command and list(STRICT_FLAGS[-2:]) == ["-Xptxas", "-Werror"]


def test_kernel_source_is_self_contained_for_nvrtc():
    # CuPy compiles the kernel with NVRTC, which has no system headers.
    assert not re.search(r"^\s*#\s*include", kernel_source(), re.MULTILINE)
    assert "__launch_bounds__" in kernel_source() and 'extern "C"' in kernel_source()
