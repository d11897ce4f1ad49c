"""The common result's stage reports: a solver stage names the size of the model it solved, typed."""

import json

from collsynth.encodings.milp_model import Lin, MilpModel
from collsynth.schedule.result import ModelSize, StageReport


def test_a_stage_report_carries_the_model_size_it_was_given_and_serialises_it():
    model = MilpModel("m")
    x, y = model.add_binaries(2)
    model.add_ge("cover", Lin.total([x, y]), 1.0)
    model.add_le("cap", Lin.of(x), 0.0)
    size = model.size()
    assert isinstance(size, ModelSize)
    assert (size.columns, size.integer_columns, size.rows, size.nonzeros) == (2, 2, 2, 3)
    report = StageReport("routing MILP", 0.5, "optimal", 1.0, status="optimal", solver="highs", size=size)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["model"] == {"columns": 2, "integer_columns": 2, "rows": 2, "nonzeros": 3,
                             "families": {"cover": 1, "cap": 1}}
    assert "model" not in StageReport("ordering", 0.1, "heuristic").to_dict()
    assert str(size) == "2 cols (2 integer), 2 rows, 3 nonzeros"
