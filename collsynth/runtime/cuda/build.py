"""The kernel source and its offline compilation: nvcc, or NVRTC (CuPy's compiler) through ctypes; no GPU needed."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from collsynth.runtime.cuda.flatten import CudaBackendError

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


# --- NVRTC (what CuPy's RawModule compiles with), called through its C API so no CuPy and no GPU are needed ---------

# CuPy 13.x `RawModule(code=...)` with no options reaches NVRTC with (cupy/_core core.pyx
# assemble_cupy_compiler_options, cupy/cuda/compiler.py _compile_with_cache_cuda and compile_using_nvrtc):
#   "--std=c++14" (added only when the caller gives no -std), -I for CuPy's bundled CCCL and headers and for
#   $CUDA_PATH/include (irrelevant here: the kernel includes nothing), "-ftz=true",
#   "--device-as-default-execution-space" (NVRTC >= 12), and "-arch=sm_XX" (a cubin; "-arch=compute_XX", PTX,
#   when the device is newer than NVRTC knows) from _get_arch_for_options_for_nvrtc.
CUPY_NVRTC_OPTIONS = ("--std=c++14", "-ftz=true", "--device-as-default-execution-space")
NVRTC_INSTALL_HINT = "install it with `pip install nvidia-cuda-nvrtc-cu12` (or `cupy-cuda12x[ctk]`), or set CUDA_PATH"
# Directories of NVIDIA's pip wheels inside the `nvidia` namespace package: CUDA 12's nvidia-cuda-nvrtc-cu12 and
# CUDA 13's nvidia-cuda-nvrtc.
_PIP_NVRTC_DIRS = ("cuda_nvrtc/lib", "cu13/lib")
_TOOLKIT_ROOTS = ("CUDA_PATH", "CUDA_HOME")


class NvrtcUnavailableError(CudaBackendError):
    """libnvrtc cannot be found or loaded."""


class NvrtcCompileError(CudaBackendError):
    """NVRTC rejected the source or the options; `log` holds NVRTC's whole log."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class NvrtcOutput:
    ptx: str
    cubin: bytes  # empty unless `arch` is a real architecture (sm_XX): then NVRTC also runs ptxas
    log: str  # NVRTC's compile log: warnings land here even when the compile succeeds
    version: tuple[int, int]

    def __str__(self) -> str:
        kind = f"PTX {len(self.ptx)} chars" + (f", cubin {len(self.cubin)} bytes" if self.cubin else "")
        return f"NVRTC {self.version[0]}.{self.version[1]}: {kind}, log {len(self.log.strip())} chars"


def _shortest_library(directory: Path) -> Path | None:
    # libnvrtc.so / libnvrtc.so.12 / libnvrtc.so.12.9.86, never libnvrtc.alt.so.* nor libnvrtc-builtins.
    found = sorted(directory.glob("libnvrtc.so*"), key=lambda p: (len(p.name), p.name))
    return found[0] if found else None


def _pip_nvrtc_dirs() -> list[Path]:
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    return [Path(root) / sub for root in roots for sub in _PIP_NVRTC_DIRS]


def find_nvrtc(environ: Mapping[str, str] | None = None, *, pip_packages: bool = True) -> str | None:
    """Path (or loadable soname) of libnvrtc, or None.

    Search order: NVIDIA's pip wheels (what cupy-cuda12x[ctk] installs), $CUDA_PATH/$CUDA_HOME lib64 (an explicit
    choice beats the loader's default), the dynamic loader's search path, /usr/local/cuda/lib64.
    """
    env = os.environ if environ is None else environ
    directories = _pip_nvrtc_dirs() if pip_packages else []
    directories += [Path(env[name]) / "lib64" for name in _TOOLKIT_ROOTS if env.get(name)]
    for directory in directories:
        if directory.is_dir() and (library := _shortest_library(directory)) is not None:
            return str(library)
    if (soname := ctypes.util.find_library("nvrtc")) is not None:
        return soname
    fallback = Path("/usr/local/cuda/lib64")
    library = _shortest_library(fallback) if fallback.is_dir() else None
    return str(library) if library is not None else None


def _load_nvrtc(library: str | None) -> ctypes.CDLL:
    path = library if library is not None else find_nvrtc()
    if path is None:
        raise NvrtcUnavailableError(f"NVRTC (libnvrtc) was not found; {NVRTC_INSTALL_HINT}")
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise NvrtcUnavailableError(f"cannot load NVRTC from {path} ({exc}); {NVRTC_INSTALL_HINT}") from None
    program_p = ctypes.POINTER(ctypes.c_void_p)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    signatures = {  # nvrtc.h; every call returns an nvrtcResult (0 = NVRTC_SUCCESS)
        "nvrtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
        "nvrtcCreateProgram": [program_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcCompileProgram": [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
        "nvrtcGetProgramLogSize": [ctypes.c_void_p, size_p],
        "nvrtcGetProgramLog": [ctypes.c_void_p, ctypes.c_char_p],
        "nvrtcGetPTXSize": [ctypes.c_void_p, size_p],
        "nvrtcGetPTX": [ctypes.c_void_p, ctypes.c_char_p],
        "nvrtcGetCUBINSize": [ctypes.c_void_p, size_p],
        "nvrtcGetCUBIN": [ctypes.c_void_p, ctypes.c_char_p],
        "nvrtcDestroyProgram": [program_p],
    }
    try:
        for name, argtypes in signatures.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int
        lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p
    except AttributeError as exc:
        raise NvrtcUnavailableError(f"{path} is not a usable NVRTC ({exc}); {NVRTC_INSTALL_HINT}") from None
    return lib


def _checked(lib: ctypes.CDLL, result: int, call: str) -> None:
    if result != 0:
        reason = (lib.nvrtcGetErrorString(result) or b"unknown error").decode()
        raise CudaBackendError(f"NVRTC call {call} failed: {reason}")


def nvrtc_version(library: str | None = None) -> tuple[int, int]:
    lib = _load_nvrtc(library)
    major, minor = ctypes.c_int(), ctypes.c_int()
    _checked(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _read(lib: ctypes.CDLL, program: ctypes.c_void_p, what: str) -> bytes:
    size = ctypes.c_size_t()
    _checked(lib, getattr(lib, f"nvrtcGet{what}Size")(program, ctypes.byref(size)), f"nvrtcGet{what}Size")
    buffer = ctypes.create_string_buffer(size.value)
    if size.value:
        _checked(lib, getattr(lib, f"nvrtcGet{what}")(program, buffer), f"nvrtcGet{what}")
    return buffer.raw.rstrip(b"\0") if what != "CUBIN" else buffer.raw


def first_error_line(log: str) -> str:
    """The line of an NVRTC/nvcc log that names the first error (else its first non-empty line)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"\berror\b", line)]
    return (errors or lines or ["(empty log)"])[0]


def nvrtc_compile(source: str, *, arch: str = "compute_80", options: Sequence[str] = (),
                  library: str | None = None, name: str = KERNEL_FILE) -> NvrtcOutput:
    """Compile CUDA C++ `source` with NVRTC for `arch` (compute_XX: PTX only; sm_XX: PTX and a cubin)."""
    lib = _load_nvrtc(library)
    major, minor = ctypes.c_int(), ctypes.c_int()
    _checked(lib, lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    flags = [*options, f"-arch={arch}"]
    program = ctypes.c_void_p()
    _checked(lib, lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), name.encode(), 0, None, None),
             "nvrtcCreateProgram")
    try:
        encoded = (ctypes.c_char_p * len(flags))(*(flag.encode() for flag in flags))
        result = lib.nvrtcCompileProgram(program, len(flags), encoded)
        log = _read(lib, program, "ProgramLog").decode(errors="replace")
        if result != 0:
            raise NvrtcCompileError(f"NVRTC {major.value}.{minor.value} failed to compile {name} for {arch}: "
                                    f"{first_error_line(log)} (fix the source or the options)", log)
        ptx = _read(lib, program, "PTX").decode()
        cubin = _read(lib, program, "CUBIN") if arch.startswith("sm_") else b""
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))
    return NvrtcOutput(ptx=ptx, cubin=cubin, log=log, version=(major.value, minor.value))


def compile_with_nvrtc(source: str, *, arch: str = "compute_80", options: Sequence[str] = (),
                       library: str | None = None) -> str:
    """The PTX NVRTC makes of `source` for `arch` (NvrtcCompileError with the log's first error line on failure)."""
    return nvrtc_compile(source, arch=arch, options=options, library=library).ptx
