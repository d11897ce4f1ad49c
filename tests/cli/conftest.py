"""Helpers for the CLI tests: a small valid MSCCL-IR XML file."""

from __future__ import annotations

import pytest

from collsynth.algorithms import LIBRARY, suggested_parameters
from collsynth.compiler import compile_program
from collsynth.emit.msccl_xml import write_xml
from collsynth.topologies.library import ring


@pytest.fixture(scope="session")
def ring_allgather_xml(tmp_path_factory):
    """`ring` AllGather on ring:4, compiled and written (it passes the interpreter)."""
    topology = ring(4)
    entry = LIBRARY["ring_allgather"]
    program = entry.builder(topology, **suggested_parameters(entry, topology))
    path = tmp_path_factory.mktemp("xml") / "ring_ag.xml"
    write_xml(compile_program(program), path)
    return path
