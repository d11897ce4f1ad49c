"""The kernel source and its offline compilation with nvcc (used by tests and by anyone without CuPy)."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

KERNEL_FILE = "interpreter.cu"
# Warnings of every kind are errors: host compiler, nvcc front end, and ptxas.
STRICT_FLAGS = ("-Xcompiler", "-Wall,-Wextra,-Werror", "--Werror", "all-warnings", "-Xptxas", "-Werror")


def kernel_source() -> str:
    return resources.files("collsynth.runtime.cuda").joinpath(KERNEL_FILE).read_text()


def kernel_path() -> Path:
    return Path(str(resources.files("collsynth.runtime.cuda").joinpath(KERNEL_FILE)))


def find_nvcc() -> str | None:
    return shutil.which("nvcc")


def nvcc_command(arch: str, output: Path, nvcc: str = "nvcc", *, cubin: bool = False,
                 extra: tuple[str, ...] = ()) -> list[str]:
    """The strict compile of the kernel for `arch` (e.g. "sm_90"): an object file, or a cubin (device code only)."""
    kind = "-cubin" if cubin else "-c"
    return [nvcc, f"-arch={arch}", "-std=c++14", kind, "-o", str(output), str(kernel_path()), *STRICT_FLAGS, *extra]


def nvcc_compile(arch: str, output: Path, nvcc: str = "nvcc", *, cubin: bool = False, extra: tuple[str, ...] = (),
                 timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(nvcc_command(arch, output, nvcc, cubin=cubin, extra=extra), capture_output=True, text=True,
                          timeout=timeout, check=False)
