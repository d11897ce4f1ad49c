import os

import pytest

# Property tests: bounded and deterministic so CI time is predictable.
from hypothesis import settings

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def cli_runner():
    from click.testing import CliRunner

    return CliRunner()
