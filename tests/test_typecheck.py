"""The type checker is part of the test command: mypy reports no error on the package (issue 12's target).

mypy checks the whole package in a process of its own (~30 s of CPU), started in the background as soon as
collection has selected this test (tests/conftest.py, `pytest_collection_finish`), so that it runs beside the rest
of the suite on a second core; the test waits for its verdict. Its result does not depend on when it finishes."""

from __future__ import annotations

import pytest

pytest.importorskip("mypy.api", reason="mypy comes with the test extra")


def test_mypy_reports_no_error_on_collsynth(mypy_run) -> None:
    status, output = mypy_run.result()
    assert status == 0, output
