"""The type checker is part of the test command: mypy reports no error on the package (issue 12's target)."""

from __future__ import annotations

from pathlib import Path

import pytest

import collsynth

mypy_api = pytest.importorskip("mypy.api", reason="mypy comes with the test extra")
ROOT = Path(collsynth.__file__).resolve().parent.parent


def test_mypy_reports_no_error_on_collsynth(tmp_path: Path) -> None:
    stdout, stderr, status = mypy_api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                           "--cache-dir", str(tmp_path / "mypy_cache"), str(ROOT / "collsynth")])
    assert status == 0, stdout + stderr
