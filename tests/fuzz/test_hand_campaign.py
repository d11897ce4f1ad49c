"""The hand-written campaign (tests/fuzz/hand_campaign.py) under `-m slow`: every case a clean refusal."""

from __future__ import annotations

import pytest
from hand_campaign import main_campaign


@pytest.mark.slow
def test_every_hand_written_bad_input_is_refused_in_one_line(capsys):
    code = main_campaign()
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.strip().endswith("clean 138"), out
