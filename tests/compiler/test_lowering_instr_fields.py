"""_one_instance reads an Instr by position (one slice, not seven field lookups): the positions it relies on."""

from collsynth.compiler import lowering
from collsynth.compiler.dag import Instr


def test_one_instance_reads_the_fields_it_names():
    assert Instr._fields[:7] == ("kind", "rank", "src_buf", "src_off", "dst_buf", "dst_off", "cnt")
    assert Instr._fields[lowering._INSTR_LINE] == "line"
