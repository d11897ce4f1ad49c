"""The scripts in bench/ run as `python bench/NAME.py`, which puts bench/ first on sys.path: a script named
after a package that collsynth or its dependencies import shadows that package. bench/cuda.py did exactly
that on a GPU machine: CuPy 14 imports NVIDIA's `cuda` package, found bench/cuda.py instead, and the benchmark
reported "CuPy is not installed"."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
# Top-level packages imported by collsynth, its extras (gpu: CuPy and NVIDIA's CUDA Python packages; dask) and
# the tools it reads, whether or not this machine has them installed.
IMPORTED_PACKAGES = frozenset({
    "collsynth", "z3", "pulp", "highspy", "networkx", "lxml", "click", "numpy", "matplotlib", "rich", "google",
    "pydantic", "pydantic_core", "cupy", "cupy_backends", "cupyx", "cuda", "fastrlock", "nvidia", "dask",
    "distributed", "msccl", "mscclpp", "hypothesis", "pytest",
})


def bench_scripts() -> list[str]:
    return sorted(path.stem for path in BENCH.glob("*.py"))


def test_there_are_bench_scripts() -> None:
    assert "cuda_backend" in bench_scripts()


def test_no_bench_script_shadows_a_package_it_may_import() -> None:
    shadowing = [name for name in bench_scripts() if name in IMPORTED_PACKAGES]
    assert not shadowing, f"rename bench/{shadowing[0]}.py: it shadows the package {shadowing[0]!r}"


def installed_origin(name: str) -> str | None:
    """Where `name` would be imported from outside this repository (None: nowhere, or only the repo's own folders,
    such as the test directories pytest puts on sys.path)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:  # absent, or a namespace package (a bare folder)
        return None
    return None if Path(spec.origin).resolve().is_relative_to(REPO) else spec.origin


def test_no_bench_script_shadows_an_installed_module() -> None:
    installed = [name for name in bench_scripts() if name in sys.stdlib_module_names or installed_origin(name)]
    assert not installed, f"bench/{installed[0]}.py shadows the installed module {installed[0]!r}; rename it"
