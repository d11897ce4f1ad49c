"""compile_program: the named passes, in order. Each pass is a pure function; every intermediate form
(InstrDAG, ChannelledDAG, Schedule, Placement, Dependencies, TbProgram) prints readably."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from typing import Any

from collsynth.compiler.checks import check_ir
from collsynth.compiler.dag import aggregate_contiguous, fuse_instructions, order_messages, trace_to_dag
from collsynth.compiler.deps import insert_dependencies, prune_dependencies
from collsynth.compiler.errors import CompileError
from collsynth.compiler.lowering import insert_nops, lower_to_ir, replicate_instances, step_lines
from collsynth.compiler.placement import assign_channels, assign_threadblocks, schedule
from collsynth.ir import Algo
from collsynth.language.program import Program, ProgramOptions

_OPTION_NAMES = frozenset(f.name for f in fields(ProgramOptions))


def compile_program(program: Program, **options: Any) -> Algo:
    """Program -> MSCCL-IR. Keyword options override the program's own: any ProgramOptions field
    (instr_fusion, threadblock_policy, interleaved_replication, aggregate, check, dependence_nop) and
    `instances` / `protocol`."""
    program = with_options(program, **options)
    opts = program.options
    with _collector_paused():
        dag = trace_to_dag(program) if opts.program_message_order else order_messages(trace_to_dag(program))
        if opts.aggregate:
            dag = aggregate_contiguous(dag, contiguous_io=program.instances == 1 or not opts.interleaved_replication)
        if opts.instr_fusion:
            dag = fuse_instructions(dag)
        placed = assign_threadblocks(schedule(assign_channels(dag)), opts.threadblock_policy)
        deps = prune_dependencies(insert_dependencies(placed))
        tbprog = insert_nops(replicate_instances(deps, program))
        return check_ir(lower_to_ir(tbprog), step_lines(tbprog), order=opts.check, source=dag.source)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The passes build large acyclic data (tuples, lists): the cyclic garbage collector scans it over and
    over while it grows, for about a third of the compile time, and can free nothing. Pause it while
    compiling; reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def with_options(program: Program, **options: Any) -> Program:
    """The program with some options (or instances/protocol) replaced."""
    unknown = set(options) - _OPTION_NAMES - {"instances", "protocol"}
    if unknown:
        known = ", ".join(sorted(_OPTION_NAMES | {"instances", "protocol"}))
        raise CompileError(f"unknown compiler option(s) {', '.join(sorted(unknown))}; known: {known}")
    top = {k: options.pop(k) for k in ("instances", "protocol") if k in options}
    if "threadblock_policy" in options:
        policy = options["threadblock_policy"]
        options["threadblock_policy"] = getattr(policy, "value", policy)
    if options:
        top["options"] = replace(program.options, **options)
    return replace(program, **top) if top else program
