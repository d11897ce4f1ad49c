"""The chunk-oriented DSL, MSCCLang-compatible.

An MSCCLang program runs unchanged after replacing the import prefix `msccl.` by `collsynth.`:

    from collsynth.language import *
    from collsynth.language.collectives import AllReduce
    from collsynth.topologies import *

    with MSCCLProgram("ring", fully_connected(4), AllReduce(4, 4, True), instances=1):
        c = chunk(0, Buffer.input, 0)
        c = chunk(1, Buffer.input, 0).reduce(c)
        ...
        XML()      # prints the MSCCL-IR XML
        Check()    # True if the postcondition holds (symbolically, then in the CPU interpreter)

The native API takes the program explicitly (no global): `ProgramBuilder(name, topology, collective,
...)`, `builder.chunk(...)`, `ref.copy(...)`, `ref.reduce(...)`, `builder.build() -> Program` (see
builder.py; the Program contract is documented in program.py). `with MSCCLProgram(...)` sets a
ContextVar to the program for the module-level `chunk()`, `XML()`, `Check()` and resets it on exit.

This face is the one place of the DSL that drives later stages: XML() and Check() call the compiler,
the XML emitter and the interpreter (imported when called).
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

from collsynth.collectives import Collective as SpecCollective
from collsynth.language.buffers import Buffer, BufferLike, ThreadblockPolicy, buffer_name, is_scratch
from collsynth.language.builder import CAPTURE, ChunkRef, ProgramBuilder
from collsynth.language.collectives import Chunk, Collective, CompatView, ReduceChunk, as_collective
from collsynth.language.context import OPEN_PROGRAM, open_program
from collsynth.language.mscclpp import CURRENT_MSCCLPP, MSCCLPPProgram, rank
from collsynth.language.program import (
    ChunkOp,
    Program,
    ProgramError,
    ProgramOptions,
    Slot,
    alias_slot,
    validate_program,
)
from collsynth.language.symbolic import SymbolicState, check_postcondition, evaluate, run_symbolic
from collsynth.language.types import ChannelType, ChunkInstruction, Instruction, ReplicationPolicy
from collsynth.topologies import Topology

_CURRENT: ContextVar[MSCCLProgram | None] = ContextVar("collsynth_language_program", default=None)

# Elements per chunk when Check() runs the compiled program in the interpreter.
CHECK_CHUNK_ELEMS = 4


class MSCCLProgram:
    """MSCCLang's program context: `with MSCCLProgram(name, topology, collective, instances, ...):`."""

    def __init__(self, name: str, topo: Topology, collective: SpecCollective | Collective, instances: int = 1,
                 protocol: str = "Simple", threadblock_policy: ThreadblockPolicy | str = ThreadblockPolicy.auto,
                 interleaved_replication: bool = True, instr_fusion: bool = True, check_xml: bool = True,
                 dependence_nop: bool = False, aggregate: bool = True) -> None:
        self.compat = collective if isinstance(collective, Collective) else None
        self.builder = ProgramBuilder(name, topo, as_collective(collective), instances, protocol,
                                      instr_fusion=instr_fusion, threadblock_policy=threadblock_policy,
                                      interleaved_replication=interleaved_replication, aggregate=aggregate,
                                      check=check_xml, dependence_nop=dependence_nop)
        self._token: Token[MSCCLProgram | None] | None = None
        self._open: Token[str | None] | None = None
        self._lowered: tuple[int, Any] | None = None

    # MSCCLang attributes
    @property
    def name(self) -> str:
        return self.builder.name

    @property
    def topo(self) -> Topology:
        return self.builder.topology

    @property
    def collective(self) -> SpecCollective | Collective:
        """MSCCLang's `prog.collective`: the collective object the program was given."""
        return self.compat if self.compat is not None else self.builder.collective

    @property
    def num_ranks(self) -> int:
        return self.builder.collective.num_ranks

    @property
    def instances(self) -> int:
        return self.builder.instances

    @property
    def protocol(self) -> str:
        return self.builder.protocol

    @property
    def threadblock_policy(self) -> ThreadblockPolicy:
        return ThreadblockPolicy(self.builder.options.threadblock_policy)

    @property
    def interleaved_replication(self) -> bool:
        return self.builder.options.interleaved_replication

    @property
    def instr_fusion(self) -> bool:
        return self.builder.options.instr_fusion

    @property
    def check_xml(self) -> bool:
        return self.builder.options.check

    @property
    def dependence_nop(self) -> bool:
        return self.builder.options.dependence_nop

    @property
    def buffers(self) -> list[dict[Buffer, list[Any]]]:
        """MSCCLang's `prog.buffers`: per rank `{Buffer.input: [...], Buffer.output: [...]}` of the chunks traced so
        far (Chunk, ReduceChunk or None), what a collective's `check(prog)` reads."""
        return CompatView(self.builder.state).buffers

    def __enter__(self) -> MSCCLProgram:
        self._open = open_program(self.name)
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._token is not None:
            _CURRENT.reset(self._token)
            if self._open is not None:
                OPEN_PROGRAM.reset(self._open)
            self._token = None
        if exc_type is None:
            self.builder.build()  # hands the program to `collsynth compile` when it runs this file

    def get_ref(self, rank: int, buffer: Buffer | str, index: int, size: int = 1) -> ChunkRef:
        """MSCCLang: a reference to `size` chunks at (rank, buffer, index) (what chunk() returns)."""
        return self.builder.chunk(rank, buffer, index, size)

    def get_chunks(self, rank: int, buffer: Buffer, index: int, size: int = 1) -> list[Any]:
        """MSCCLang: the chunks (Chunk, ReduceChunk or None) at (rank, buffer, index .. index + size - 1)."""
        held = self.buffers[rank].get(buffer) or []
        return [held[i] if 0 <= i < len(held) else None for i in range(index, index + size)]

    def print_chunk_dag(self) -> None:
        """MSCCLang's Print(): the traced operations, one per line."""
        for op in self.builder.ops:
            print(op)

    def program(self) -> Program:
        """The frozen Program traced so far."""
        return Program(self.builder.name, self.builder.topology, self.builder.collective, self.builder.protocol,
                       self.builder.instances, self.builder.options,
                       buffers=tuple(tuple(named.items()) for named in self.builder._scratch),
                       ops=self.builder.ops)

    def lower(self) -> Any:
        """The compiled MSCCL-IR (collsynth.ir.Algo); cached until more ops are added."""
        from collsynth.compiler import compile_program

        count = len(self.builder._ops)
        if self._lowered is None or self._lowered[0] != count:
            self._lowered = (count, compile_program(self.program()))
        return self._lowered[1]

    def generate_xml(self, target: str | None = None) -> str:
        """The MSCCL-IR XML; with a runtime `target` (collsynth.core.targets), compiled for it (split to its
        loader limits) and written in its spelling."""
        from collsynth.emit.msccl_xml import ir_to_xml

        if target is None:
            return ir_to_xml(self.lower())
        from collsynth.compiler import compile_program

        return ir_to_xml(compile_program(self.program(), target), target)

    def check(self) -> bool:
        """The postcondition, symbolically (MSCCLang's check), then in the CPU interpreter."""
        state = self.builder.state
        if self.compat is not None and self.compat.has_custom_check():
            ok = bool(self.compat.check(CompatView(state)))
        else:
            problems = check_postcondition(state)
            for line in problems:
                print(line)
            ok = not problems
        if not ok:
            return False
        return self._run_interpreter()

    def _run_interpreter(self) -> bool:
        from collsynth.compiler import instance_collective
        from collsynth.runtime import execute

        ir = self.lower()
        coll = instance_collective(self.builder.collective, self.instances)
        exact = self.compat is None or not self.compat.has_custom_check()
        nbytes = coll.input_chunks * CHECK_CHUNK_ELEMS * 4
        result = execute(ir, backend="cpu", nbytes=nbytes, dtype="float32", collective=coll, postcondition=exact)
        if not result.passed:
            print(result)
        return bool(result.passed)


def _current(what: str) -> MSCCLProgram:
    program = _CURRENT.get()
    if program is None:
        raise ProgramError(f"{what}() needs an open program: call it inside `with MSCCLProgram(...):`")
    return program


def chunk(rank: int, buffer: Buffer | str, index: int, size: int = 1) -> ChunkRef | None:
    """A reference to `size` chunks at (rank, buffer, index) of the open program (MSCCLProgram or
    MSCCLPPProgram, as MSCCLang's chunk() serves both); None when the slot at `index` holds no data yet, as
    MSCCLang answers (microsoft/msccl-tools msccl/language/__init__.py: `chunk()` returns None when
    `buffers[rank][buffer][index] is None`), so programs can test `chunk(...) is None`. A rank, buffer or
    index outside the program still raises, as there."""
    mscclpp = CURRENT_MSCCLPP.get()
    if mscclpp is not None and _CURRENT.get() is None:
        if not mscclpp.holds_data(rank, buffer, index):
            return None
        # an MSCCL++ Ref (language/mscclpp.py); typed as ChunkRef so that MSCCLang programs stay checked
        return mscclpp.get_ref(rank, buffer, index, size, partial=True)  # type: ignore[return-value]
    builder = _current("chunk").builder
    if not builder.holds_data(rank, buffer, index):
        return None
    return builder.chunk(rank, buffer, index, size, partial=True)


def written_chunk(rank: int, buffer: Buffer | str, index: int, size: int = 1) -> ChunkRef:
    """chunk() for code that needs the data there: a reference, or ProgramError naming the slot nobody wrote
    (collsynth's own programs and routines use it under the name `chunk`)."""
    mscclpp = CURRENT_MSCCLPP.get()
    if mscclpp is not None and _CURRENT.get() is None:
        return mscclpp.get_ref(rank, buffer, index, size)  # type: ignore[return-value]
    return _current("chunk").builder.chunk(rank, buffer, index, size)


def XML(target: str | None = None) -> None:  # noqa: N802 - MSCCLang's name
    """Print the open program's MSCCL-IR XML to stdout (for a runtime `target` when given: MSCCLang's XML() takes
    none, so `XML()` stays its exact form)."""
    program = _current("XML")
    print(program.generate_xml(target).rstrip("\n"))
    captured = CAPTURE.get()
    if captured is not None:
        captured.append(program.lower())


def Check() -> bool:  # noqa: N802 - MSCCLang's name
    """True if the open program meets its collective's postcondition; prints what is wrong otherwise. An
    MSCCLPPProgram is checked on its traced chunks, then its execution plan runs in the plan interpreter."""
    mscclpp = CURRENT_MSCCLPP.get()
    if mscclpp is not None and _CURRENT.get() is None:
        if not mscclpp.check():
            return False
        result = _run_plan(mscclpp, mscclpp.to_plan())
        if not result.passed:
            print(result)
        return bool(result.passed)
    return _current("Check").check()


def _run_plan(program: MSCCLPPProgram, plan: dict[str, Any]) -> Any:
    from collsynth.runtime.plan import execute_plan

    coll = program.spec if program.instances == 1 else program.spec.split(program.instances)
    return execute_plan(plan, collective=coll)


def checked_mscclpp_plan(program: MSCCLPPProgram) -> dict[str, Any]:
    """The program's MSCCL++ execution plan, after it passed the plan interpreter (else ProgramError)."""
    plan = program.to_plan()
    result = _run_plan(program, plan)
    if not result.passed:
        raise ProgramError(f"MSCCL++ program {program.name!r}: its plan fails the plan interpreter: "
                           f"{str(result).splitlines()[0]}")
    return plan


def Json() -> None:  # noqa: N802 - MSCCLang's name
    """Print the open MSCCLPPProgram's MSCCL++ execution plan (JSON), checked in the plan interpreter first."""
    program = CURRENT_MSCCLPP.get()
    if program is None:
        raise ProgramError("Json() needs an open program: call it inside `with MSCCLPPProgram(...):`")
    from collsynth.emit.mscclpp import plan_to_json

    print(plan_to_json(checked_mscclpp_plan(program)).rstrip("\n"))


# MSCCLang's remaining public names of `msccl.language` (microsoft/msccl-tools msccl/language/__init__.py),
# with its semantics, for programs that use them:
#
# - `create_scratch(rank, name)`: declares a scratch buffer `name` on `rank` of the open program and returns the
#   name to pass as a buffer (`chunk(rank, name, i)`, `ref.copy(dst, name, i)`). Scratch buffers also come into
#   being on first use, as in MSCCLang, so declaring one is optional; a name the DSL cannot use is refused here.
# - `Print()`: prints the open program's traced operations, one per line (MSCCLang prints its chunk DAG).
# - `Ref`: MSCCLang's name for the chunk reference that `chunk()` and `copy()` return (our ChunkRef).
# - `written_chunk()` (ours, not MSCCLang's): chunk() for code that needs the data there, typed as never None.
#
# - MSCCLang's MSCCL++ half (`MSCCLPPProgram`, `Json()`, `Ref.put/get/signal/wait/...`, `ChannelType`,
#   `ReplicationPolicy`): language/mscclpp.py; `chunk()` and `Check()` serve whichever program is open.

Ref = ChunkRef


def create_scratch(rank: int, name: BufferLike) -> BufferLike:
    """Declare scratch buffer `name` on `rank` of the open program; returns `name` (the comment above)."""
    program = _current("create_scratch")
    if not 0 <= rank < program.num_ranks:
        raise ProgramError(f"create_scratch({rank}, {name!r}): rank {rank} is not in 0..{program.num_ranks - 1}")
    try:
        canonical = buffer_name(name)
    except TypeError as exc:
        raise ProgramError(f"create_scratch({rank}, {name!r}): {exc}") from None
    if not is_scratch(canonical):
        raise ProgramError(f"create_scratch({rank}, {name!r}): {name!r} names an input/output buffer, not a "
                           "scratch buffer; pick another name")
    return name


def Print() -> None:  # noqa: N802 - MSCCLang's name
    """Print the open program's traced operations, one per line."""
    _current("Print").print_chunk_dag()


__all__ = [
    "ChannelType", "ChunkInstruction", "Instruction", "Json", "MSCCLPPProgram", "ReplicationPolicy", "rank",
    "Print", "Ref", "create_scratch",
    "Buffer", "Check", "Chunk", "ChunkOp", "ChunkRef", "MSCCLProgram", "Program", "ProgramBuilder",
    "ProgramError", "ProgramOptions", "ReduceChunk", "Slot", "SymbolicState", "ThreadblockPolicy", "XML",
    "alias_slot", "check_postcondition", "chunk", "evaluate", "run_symbolic", "validate_program", "written_chunk",
]
