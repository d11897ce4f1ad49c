"""The optimizing compiler: Program -> MSCCL-IR (`collsynth.ir.Algo`), as a list of pure passes.

    trace_to_dag -> (order_port_sends, timed schedules) -> order_messages -> aggregate_contiguous
    -> fuse_instructions -> assign_channels -> schedule
    -> assign_threadblocks -> insert_dependencies -> prune_dependencies -> replicate_instances
    -> insert_nops -> lower_to_ir -> check_ir

Every pass is linear or n log n in the number of instructions.
"""

from collsynth.compiler.checks import check_ir
from collsynth.compiler.dag import Instr, InstrDAG, depths, trace_to_dag
from collsynth.compiler.deps import Dependencies, insert_dependencies, prune_dependencies
from collsynth.compiler.errors import CompileError
from collsynth.compiler.lowering import (
    TbProgram,
    cross_instance_waits,
    insert_nops,
    instance_collective,
    lower_to_ir,
    replicate_instances,
    step_lines,
)
from collsynth.compiler.merging import aggregate_contiguous, fuse_instructions
from collsynth.compiler.ordering import order_messages
from collsynth.compiler.pipeline import FormCache, compile_program, with_options
from collsynth.compiler.placement import (
    ChannelledDAG,
    Placement,
    Schedule,
    assign_channels,
    assign_threadblocks,
)
from collsynth.compiler.ports import order_port_sends
from collsynth.compiler.scheduling import schedule

__all__ = [
    "ChannelledDAG", "CompileError", "Dependencies", "FormCache", "Instr", "InstrDAG", "Placement", "Schedule",
    "TbProgram",
    "aggregate_contiguous", "assign_channels", "assign_threadblocks", "check_ir", "compile_program",
    "cross_instance_waits", "depths", "fuse_instructions", "insert_dependencies", "insert_nops",
    "instance_collective", "lower_to_ir", "order_messages", "order_port_sends", "prune_dependencies",
    "replicate_instances", "schedule",
    "step_lines", "trace_to_dag", "with_options",
]
