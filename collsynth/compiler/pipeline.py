"""compile_program: the named passes, in order. Each pass is a pure function; every intermediate form
(InstrDAG, ChannelledDAG, Schedule, Placement, Dependencies, TbProgram) prints readably."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from functools import partial
from typing import Any

from collsynth.compiler.checks import check_ir
from collsynth.compiler.dag import trace_to_dag
from collsynth.compiler.deps import insert_dependencies, prune_dependencies
from collsynth.compiler.errors import CompileError
from collsynth.compiler.lowering import insert_nops, lower_to_ir, replicate_instances, step_lines
from collsynth.compiler.merging import aggregate_contiguous, fuse_instructions
from collsynth.compiler.ordering import order_messages
from collsynth.compiler.placement import assign_channels, assign_threadblocks
from collsynth.compiler.ports import order_port_sends
from collsynth.compiler.scheduling import schedule
from collsynth.compiler.split import pair_threadblocks, split_to_target, spread_channels
from collsynth.core.collector import paused_collector
from collsynth.core.limits import FIFO_SLOTS
from collsynth.core.targets import Target, get_target
from collsynth.ir import MAX_STEPS_PER_TB, Algo
from collsynth.ir.deadlock import bounded_deadlock
from collsynth.ir.table import forget_table
from collsynth.language.program import Program, ProgramOptions

_OPTION_NAMES = frozenset(f.name for f in fields(ProgramOptions))

# after_each(pass_name, form): called with every intermediate form (print it, or check it), in pass order
AfterEach = Callable[[str, Any], None]
# Forms shared by configurations of one program (see _shared_forms), kept by the caller across compiles
FormCache = dict[tuple[Any, ...], list[tuple[str, Any]]]


def compile_program(program: Program, target: Target | str | None = None, *, after_each: AfterEach | None = None,
                    reuse: FormCache | None = None, **options: Any) -> Algo:
    """Program -> MSCCL-IR. Keyword options override the program's own: any ProgramOptions field
    (instr_fusion, threadblock_policy, interleaved_replication, aggregate, check, dependence_nop) and
    `instances` / `protocol`; and `pair_threadblocks` (default True: a plain send shares the threadblock that
    received its data or that receives from its peer; False: one threadblock per connection side, so that
    no transfer waits behind an unrelated one of another connection); and `timed_order` (default False: a
    rank's sends through one port or link go in program order, for timed schedules; see ports.py).
    With a `target` (collsynth.core.targets), the work is split to fit that runtime's limits
    (compiler/split.py) or refused naming the limit and the runtime. `after_each(name, form)` sees every
    intermediate form (e.g. `lambda name, form: print(name, form, sep="\n")`). `reuse`: a dict the caller keeps
    across compiles of one program in several configurations (the tuner): the forms up to insert_dependencies
    that two configurations share (those passes read neither the protocol nor the instance count) are made
    once (the same IR either way; after_each still sees every form).
    The IR never needs more buffering than the runtime has: the schedule keeps at most the target's
    `fifo_slots` messages in flight per connection, and an IR that would still deadlock with that many
    slots (collsynth.ir.deadlock) is compiled again with one threadblock per connection side (unless
    `pair_threadblocks` was given), else refused naming the deadlock."""
    explicit_pairing = "pair_threadblocks" in options
    pair_sends = bool(options.pop("pair_threadblocks", True))
    timed = bool(options.pop("timed_order", False))
    program = with_options(program, **options)
    slots = get_target(target).fifo_slots

    def build(pair: bool) -> Algo:
        compile_once = partial(_compile_once, pair_sends=pair, timed=timed, slots=slots, after_each=after_each,
                               reuse=reuse)
        if target is None:
            return compile_once(program, 1, False)
        # with a target, its own limits decide (split_to_target spreads long threadblocks), not MSCCL's default
        return split_to_target(program, target, partial(compile_once, max_steps=None))

    # The passes build large acyclic data that the cyclic collector would scan over and over while it grows
    # (about a third of the compile time) and could not free: paused here only, at the entry point, never by a
    # pass (the pause is process-wide while it lasts; a caller that disabled the collector keeps it disabled).
    with paused_collector():
        ir = build(pair_sends)
        stuck = bounded_deadlock(ir, slots)
        if stuck is not None and pair_sends and not explicit_pairing:
            ir = build(False)  # a connection side of its own waits only for its own messages
            stuck = bounded_deadlock(ir, slots)
        forget_table(ir)  # the checks' table of the IR (collsynth.ir.table): not kept past the compile
    if stuck is not None:
        raise CompileError(f"program {program.name!r} would hang in the runtime ({stuck}); receive from a peer "
                           f"before sending it more than {slots} messages, or compile with pair_threadblocks=False")
    return ir


def _compile_once(program: Program, spread: int, pair: bool, *, pair_sends: bool = True, timed: bool = False,
                  slots: int | None = FIFO_SLOTS, after_each: AfterEach | None = None,
                  max_steps: int | None = MAX_STEPS_PER_TB, reuse: FormCache | None = None) -> Algo:
    """The passes, in order; `spread` > 1 spreads each channel's transfer chains over that many channels,
    `pair` merges send-only and receive-only threadblocks (compiler/split.py); `max_steps` per threadblock is
    checked here (None: the target's check in split.py decides)."""
    opts = program.options

    def seen(name: str, form: Any) -> Any:
        if after_each is not None:
            after_each(name, form)
        return form

    shared = _shared_forms(program, spread, timed, slots, reuse, seen)
    dag = shared[0][1]
    placed = _placed_forms(program, pair_sends, pair, shared, reuse, seen)[-1][1]
    tbprog = seen("insert_nops", insert_nops(replicate_instances(placed, program)))
    return seen("lower_to_ir", check_ir(lower_to_ir(tbprog), step_lines(tbprog), order=opts.check,
                                        source=dag.source, max_steps=max_steps, slots=slots))


# What each pass up to insert_dependencies reads, for `reuse` (each pass is a pure function of its arguments;
# the arguments come from the program and the options below, nothing else):
# - trace_to_dag: the ops, buffers, collective and topology, and whether threadblock_policy is "manual" (hints);
# - order_port_sends: `timed_order` and the topology; order_messages: program_message_order;
# - aggregate_contiguous: aggregate, aggregate_either_end, and `instances == 1 or not interleaved_replication`
#   (whether runs may mix the input/output buffers with others) -- not the instance count itself;
# - fuse_instructions: instr_fusion; assign_channels / spread_channels: `spread`; schedule: `slots`;
# - assign_threadblocks: threadblock_policy and `pair_threadblocks`; pair_threadblocks: `pair`;
#   insert_dependencies / prune_dependencies: nothing more.
# None of them reads the protocol, the instance count (past the flag above), interleaved_replication otherwise,
# check or dependence_nop: replicate_instances is the first pass that does, so a new instance count or protocol
# redoes replicate_instances onward only.

def _shared_forms(program: Program, spread: int, timed: bool, slots: int | None, reuse: FormCache | None,
                  seen: AfterEach) -> list[tuple[str, Any]]:
    """The forms from trace_to_dag to schedule, in pass order (the last one is the Schedule): made, or taken
    from `reuse`, keyed by what those passes read (above); `seen` gets each as it is made or taken."""
    opts = program.options
    front_key: tuple[Any, ...] = ()
    key: tuple[Any, ...] = ()
    front = None
    if reuse is not None:
        merging = (opts.aggregate_either_end, program.instances == 1 or not opts.interleaved_replication)
        front_key = ("front", *_program_key(program), opts.threadblock_policy == "manual", timed,
                     opts.program_message_order, opts.aggregate, merging if opts.aggregate else None)
        key = ("schedule", front_key, opts.instr_fusion, spread, slots)
        if key in reuse:
            for name, form in reuse[key]:
                seen(name, form)
            return reuse[key]
        front = reuse.get(front_key)
    forms: list[tuple[str, Any]] = []

    def made(name: str, form: Any) -> Any:
        seen(name, form)
        forms.append((name, form))
        return form

    if front is None:
        dag = made("trace_to_dag", trace_to_dag(program))
        if timed:
            dag = made("order_port_sends", order_port_sends(dag, program.topology))
        if not opts.program_message_order:  # timed schedules keep each connection's messages in program order
            dag = made("order_messages", order_messages(dag))
        if opts.aggregate:
            contiguous_io = program.instances == 1 or not opts.interleaved_replication
            dag = made("aggregate_contiguous", aggregate_contiguous(dag, contiguous_io=contiguous_io,
                                                                    either_end=opts.aggregate_either_end))
        if reuse is not None:
            reuse[front_key] = list(forms)
    else:
        for name, form in front:
            made(name, form)
        dag = front[-1][1]
    if opts.instr_fusion:
        dag = made("fuse_instructions", fuse_instructions(dag))
    channelled = made("assign_channels", spread_channels(assign_channels(dag), spread))
    made("schedule", schedule(channelled, slots))
    if reuse is not None:
        reuse[key] = forms
    return forms


def _placed_forms(program: Program, pair_sends: bool, pair: bool, shared: list[tuple[str, Any]],
                  reuse: FormCache | None, seen: AfterEach) -> list[tuple[str, Any]]:
    """The forms from assign_threadblocks to insert_dependencies (the last one is the Dependencies), after the
    `shared` forms: made, or taken from `reuse` under the schedule's key and the threadblock options."""
    policy = program.options.threadblock_policy
    key: tuple[Any, ...] = ()
    if reuse is not None:
        key = ("placed", _Same(shared), policy, pair_sends, pair)
        if key in reuse:
            for name, form in reuse[key]:
                seen(name, form)
            return reuse[key]
    forms: list[tuple[str, Any]] = []

    def made(name: str, form: Any) -> Any:
        seen(name, form)
        forms.append((name, form))
        return form

    scheduled = shared[-1][1]
    placed = made("assign_threadblocks", assign_threadblocks(scheduled, policy, pair=pair_sends))
    if pair:
        placed = made("pair_threadblocks", pair_threadblocks(scheduled, placed))
    made("insert_dependencies", prune_dependencies(insert_dependencies(placed)))
    if reuse is not None:
        reuse[key] = forms
    return forms


class _Same:
    """Equal only to a _Same of the very same object (and it keeps that object alive, so its id stays its own)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


def _program_key(program: Program) -> tuple[Any, ...]:
    """The program less its options, protocol and instance count, for `reuse`: its large parts by identity
    (hashing the ops, the topology and the collective by value would cost more than a cache hit
    saves; the tuner passes the same objects again)."""
    return (program.name, _Same(program.topology), _Same(program.collective), _Same(program.buffers),
            _Same(program.ops))


def with_options(program: Program, **options: Any) -> Program:
    """The program with some options (or instances/protocol) replaced."""
    unknown = set(options) - _OPTION_NAMES - {"instances", "protocol"}
    if unknown:
        known = ", ".join(sorted(_OPTION_NAMES | {"instances", "protocol"}))
        raise CompileError(f"unknown compiler option(s) {', '.join(sorted(unknown))}; known: {known}")
    top: dict[str, Any] = {k: options.pop(k) for k in ("instances", "protocol") if k in options}
    if "threadblock_policy" in options:
        policy = options["threadblock_policy"]
        options["threadblock_policy"] = getattr(policy, "value", policy)
    if options:
        top["options"] = replace(program.options, **options)
    return replace(program, **top) if top else program
