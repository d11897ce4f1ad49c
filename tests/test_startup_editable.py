"""`pip install -e .` (the README's install) makes a plain .pth path entry, not an import finder: the finder runs
in `site` at every start of every process (~20 ms CPU of `collsynth --help`, issue 16). setuptools picks the
.pth when the packages' root is declared (`package-dir = {"" = "."}` in pyproject.toml). This runs that install
as the README does (pip, its isolated build) into a scratch prefix and reads what it installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _installed_here() -> list[str]:
    """This environment's collsynth files in site-packages and its console script."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    return sorted(p.name for p in [*site.glob("*collsynth*"), *Path(sys.executable).parent.glob("collsynth")])


@pytest.mark.slow  # a pip install with its isolated build (fetches setuptools): 20-40 s, and the network
def test_the_editable_install_is_a_path_entry(tmp_path: Path) -> None:
    project, prefix = tmp_path / "project", tmp_path / "prefix"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "collsynth", project / "collsynth", ignore=shutil.ignore_patterns("__pycache__"))
    before = _installed_here()
    # --ignore-installed: pip would otherwise uninstall this environment's collsynth before installing the copy
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                           "--ignore-installed", "-e", str(project), "--prefix", str(prefix)], capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _installed_here() == before  # this environment's own install untouched
    installed = [p for p in prefix.rglob("*") if "collsynth" in p.name and p.suffix in (".pth", ".py")]
    assert len(installed) == 1 and installed[0].suffix == ".pth"  # no import finder (.py) for `site` to run
    assert installed[0].read_text().split() == [str(project)]  # just the packages' root on sys.path
