"""`Program`: what a DSL program traces. The contract between the DSL, the lowering of synthesized
algorithms, and the compiler (DESIGN.md, "Program"). Stable: add fields only with defaults.

A Program is plain, frozen data:

    Program(name, topology, collective, protocol="Simple", instances=1, options=ProgramOptions(),
            buffers=((), ...), ops=(ChunkOp, ...))

- `topology` is a collsynth `Topology`, `collective` a collsynth `Collective` (its buffer layout says
  which chunk starts in which input slot and must end in which output slot).
- `protocol` is "Simple", "LL" or "LL128"; `instances` >= 1 replicates the whole program that many
  times on disjoint channels (see `ProgramOptions.interleaved_replication` for the chunk layout).
- `buffers`: per rank, the named scratch buffers as `(name, size_in_chunks)` in creation order (the
  compiler concatenates them into the IR's single scratch buffer "s" in that order). Left empty, it
  is derived from the ops (each scratch buffer sized to the highest index used, first use first).
- `ops`: `ChunkOp`s in program order. A `ChunkOp` is
      ChunkOp(op, src: Slot, dst: Slot, sendtb=None, recvtb=None, channel=None, line=0, file="")
  with `op` "copy" (dst := src) or "reduce" (dst := dst + src: the receiver's own slot `dst` is the
  local operand and the result). `Slot(rank, buffer, index, count)` names `count` consecutive chunks;
  src and dst have the same count. Buffers are "input", "output" or a scratch buffer's name.
  `sendtb`/`recvtb`/`channel` are placement hints (None = let the compiler choose); a local copy or
  reduce uses `sendtb`. `line`/`file` say where in the DSL program the op was written (0/"" if none).
- Inplace collectives alias buffers as MSCCLang does (`alias_slot`): AllGather's input is the rank's
  slice of its output, ReduceScatter's output the rank's slice of its input, AllReduce's and AllToAll's
  output is the input. Ops may name either side; the compiler resolves the alias.

`str(program)` prints one op per line, like a jaxpr.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from collsynth.collectives import Collective
from collsynth.core.errors import CollsynthError
from collsynth.language.buffers import INPUT, OUTPUT, is_scratch
from collsynth.topologies import Topology

COPY = "copy"
REDUCE = "reduce"
PROTOCOLS = ("Simple", "LL", "LL128")


class ProgramError(CollsynthError):
    """A DSL program that is malformed (the message names the DSL line where one applies)."""


def where(line: int, file: str = "") -> str:
    """A location prefix for messages: 'prog.py:12: ', 'line 12: ' or ''."""
    if line <= 0:
        return ""
    name = file.rsplit("/", 1)[-1] if file else ""
    return f"{name}:{line}: " if name else f"line {line}: "


@dataclass(frozen=True, slots=True)
class Slot:
    """`count` consecutive chunks starting at `index` of one buffer of one rank."""

    rank: int
    buffer: str
    index: int
    count: int = 1

    @property
    def end(self) -> int:
        return self.index + self.count

    def __str__(self) -> str:
        span = f"{self.index}" if self.count == 1 else f"{self.index}:{self.end}"
        return f"r{self.rank}.{self.buffer}[{span}]"


@dataclass(frozen=True, slots=True)
class ChunkOp:
    op: str  # COPY | REDUCE
    src: Slot
    dst: Slot
    sendtb: int | None = None
    recvtb: int | None = None
    channel: int | None = None
    line: int = 0
    file: str = field(default="", compare=False)

    def __str__(self) -> str:
        hints = []
        if self.sendtb is not None:
            hints.append(f"sendtb={self.sendtb}")
        if self.recvtb is not None:
            hints.append(f"recvtb={self.recvtb}")
        if self.channel is not None:
            hints.append(f"ch={self.channel}")
        arrow = "+=" if self.op == REDUCE else ":="
        text = f"{self.dst} {arrow} {self.src}"
        if hints:
            text += "  " + " ".join(hints)
        if self.line:
            text += f"  # line {self.line}"
        return text


# The same objects as Slot(...) and ChunkOp(...), built for the lowering's hot paths (a million ops at 1024
# ranks) in half the time: a frozen dataclass's __init__ sets each field through object.__setattr__, these
# set the slots directly. Neither class has a __post_init__ to skip.
_new = object.__new__
_rank, _buffer, _index, _count = (getattr(Slot, name).__set__ for name in ("rank", "buffer", "index", "count"))
_op, _src, _dst, _sendtb, _recvtb, _channel, _line, _file = (
    getattr(ChunkOp, name).__set__ for name in ("op", "src", "dst", "sendtb", "recvtb", "channel", "line", "file"))


def unit_slot(rank: int, buffer: str, index: int) -> Slot:
    """`Slot(rank, buffer, index)`: one chunk."""
    slot = _new(Slot)
    _rank(slot, rank)
    _buffer(slot, buffer)
    _index(slot, index)
    _count(slot, 1)
    return slot


def chunk_op(op: str, src: Slot, dst: Slot, sendtb: int | None, recvtb: int | None, channel: int | None, line: int,
             file: str) -> ChunkOp:
    """`ChunkOp(op, src, dst, sendtb, recvtb, channel, line, file)`."""
    made = _new(ChunkOp)
    _op(made, op)
    _src(made, src)
    _dst(made, dst)
    _sendtb(made, sendtb)
    _recvtb(made, recvtb)
    _channel(made, channel)
    _line(made, line)
    _file(made, file)
    return made


@dataclass(frozen=True)
class ProgramOptions:
    """Compiler options a program carries (MSCCLang's MSCCLProgram keywords)."""

    instr_fusion: bool = True  # r+s -> rcs, rrc+s -> rrcs, rrc+s+r -> rrs
    threadblock_policy: str = "auto"  # "auto" | "manual" (use the sendtb/recvtb hints)
    interleaved_replication: bool = True  # instances: chunk j of instance i at j*instances+i (else batched)
    aggregate: bool = True  # merge contiguous transfers to the same peer and channel
    check: bool = True  # MSCCLang's check_xml: cycle and per-connection order checks
    dependence_nop: bool = False  # accepted for MSCCLang compatibility; codegen is the same either way
    program_message_order: bool = False  # keep each connection's messages in program order (timed schedules)
    aggregate_either_end: bool = True  # a merged run of messages may also grow at its low end (compiler/merging.py)

    def __post_init__(self) -> None:
        if self.threadblock_policy not in ("auto", "manual"):
            raise ProgramError(f"threadblock_policy must be 'auto' or 'manual', got {self.threadblock_policy!r}")


@dataclass(frozen=True)
class Program:
    name: str
    topology: Topology
    collective: Collective
    protocol: str = "Simple"
    instances: int = 1
    options: ProgramOptions = ProgramOptions()
    buffers: tuple[tuple[tuple[str, int], ...], ...] = ()
    ops: tuple[ChunkOp, ...] = ()

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ProgramError(f"program {self.name!r}: protocol must be one of {', '.join(PROTOCOLS)}, "
                               f"got {self.protocol!r}")
        if not isinstance(self.instances, int) or self.instances < 1:
            raise ProgramError(f"program {self.name!r}: instances must be an integer >= 1, got {self.instances!r}")
        if self.collective.num_ranks != self.topology.num_ranks:
            raise ProgramError(f"program {self.name!r}: the collective has {self.collective.num_ranks} ranks but "
                               f"topology {self.topology.name} has {self.topology.num_ranks}")
        if not self.buffers:
            object.__setattr__(self, "buffers", scratch_from_ops(self.ops, self.collective.num_ranks))

    @property
    def num_ranks(self) -> int:
        return self.collective.num_ranks

    def scratch_sizes(self, rank: int) -> dict[str, int]:
        """Named scratch buffers of a rank and their sizes in chunks, in creation order."""
        return dict(self.buffers[rank]) if rank < len(self.buffers) else {}

    def scratch_offsets(self, rank: int) -> dict[str, int]:
        """Where each named scratch buffer starts in the rank's concatenated scratch (one instance)."""
        offsets, at = {}, 0
        for name, size in self.scratch_sizes(rank).items():
            offsets[name] = at
            at += size
        return offsets

    def __str__(self) -> str:
        o = self.options
        lines = [f"program {self.name!r}: {self.collective} on {self.topology.name}, protocol={self.protocol} "
                 f"instances={self.instances} fusion={'on' if o.instr_fusion else 'off'} "
                 f"tb={o.threadblock_policy} layout={'interleaved' if o.interleaved_replication else 'batched'}"]
        for rank, named in enumerate(self.buffers):
            if named:
                lines.append(f"  scratch r{rank}: " + ", ".join(f"{name}[{size}]" for name, size in named))
        width = len(str(max(len(self.ops) - 1, 0)))
        lines += [f"  {k:>{width}}: {op}" for k, op in enumerate(self.ops)]
        return "\n".join(lines)


def scratch_from_ops(ops: Iterable[ChunkOp], num_ranks: int) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Scratch buffer sizes implied by the ops: each buffer as large as its highest index used."""
    sizes: list[dict[str, int]] = [{} for _ in range(num_ranks)]
    for op in ops:
        for slot in (op.src, op.dst):
            if is_scratch(slot.buffer) and 0 <= slot.rank < num_ranks:
                named = sizes[slot.rank]
                named[slot.buffer] = max(named.get(slot.buffer, 0), slot.end)
    return tuple(tuple(named.items()) for named in sizes)


# --- inplace aliasing -------------------------------------------------------------------------

def alias_slot(collective: Collective, rank: int, buffer: str, index: int) -> tuple[str, int]:
    """Where (buffer, index) of `rank` really lives: inplace collectives share one buffer (MSCCLang's
    `get_buffer_index`). Identity for out-of-place collectives and scratch buffers."""
    if not collective.inplace or (buffer != INPUT and buffer != OUTPUT):
        return buffer, index
    n_in, n_out, n = collective.input_chunks, collective.output_chunks, collective.num_ranks
    if n_in == n_out:
        return (INPUT, index) if buffer == OUTPUT else (buffer, index)  # output aliases input
    if n_out == n * n_in:
        return (OUTPUT, rank * n_in + index) if buffer == INPUT else (buffer, index)  # input is a slice
    if n_in == n * n_out:
        return (INPUT, rank * n_out + index) if buffer == OUTPUT else (buffer, index)  # output is a slice
    raise ProgramError(f"collective {collective}: inplace needs the output to equal the input or to be n times "
                       f"it (input {n_in} chunks, output {n_out}); make the collective out-of-place")


def buffer_size(collective: Collective, buffer: str) -> int:
    """Chunks in the input or output buffer of one rank."""
    return collective.input_chunks if buffer == INPUT else collective.output_chunks


def initial_slots(collective: Collective) -> dict[tuple[int, str, int], int]:
    """(rank, buffer, index) -> global chunk of every slot that holds data at the start (after aliasing)."""
    slots = {}
    for chunk, rank, index in collective.inputs:
        buf, idx = alias_slot(collective, rank, INPUT, index)
        slots[(rank, buf, idx)] = chunk
    return slots


# --- validation (for programs built without the builder, e.g. lowered algorithms) --------------

def validate_program(program: Program) -> None:
    """Raise ProgramError on the first malformed op: ranks, buffers, counts, hints, links."""
    n = program.num_ranks
    coll = program.collective
    links = program.topology.link_map
    sizes = [{INPUT: coll.input_chunks, OUTPUT: coll.output_chunks, **program.scratch_sizes(r)} for r in range(n)]
    kinds = (COPY, REDUCE)
    for op in program.ops:
        # Every condition of _check_op at once, in its order, each field read once (a 1024-rank program has a
        # million ops): where all hold _check_op would pass; where one fails, _check_op names it.
        src, dst = op.src, op.dst
        sr, si, sc, dr, di = src.rank, src.index, src.count, dst.rank, dst.index
        sendtb, recvtb, channel = op.sendtb, op.recvtb, op.channel
        if not (op.op in kinds and sc == dst.count and sc >= 1
                and 0 <= sr < n and si >= 0 and si + sc <= sizes[sr].get(src.buffer, -1)  # -1: no such buffer
                and 0 <= dr < n and di >= 0 and di + sc <= sizes[dr].get(dst.buffer, -1)
                and (sr == dr or (sr, dr) in links)
                and (sendtb is None or isinstance(sendtb, int) and sendtb >= 0)
                and (recvtb is None or isinstance(recvtb, int) and recvtb >= 0)
                and (channel is None or isinstance(channel, int) and channel >= 0)):
            _check_op(program, op, sizes)


def _check_op(program: Program, op: ChunkOp, sizes: list[dict[str, int]]) -> None:
    """Raise ProgramError naming the first thing wrong with `op`, if any."""
    n, coll, topo = program.num_ranks, program.collective, program.topology
    src, dst = op.src, op.dst
    if op.op not in (COPY, REDUCE) or src.count != dst.count or src.count < 1:
        _refuse(op, f"{op.op!r} of {src} to {dst}: op must be 'copy' or 'reduce' with equal counts >= 1")
    for slot in (src, dst):
        if not 0 <= slot.rank < n:
            _refuse(op, f"rank {slot.rank} is outside 0..{n - 1}")
        size = sizes[slot.rank].get(slot.buffer)
        if slot.index < 0 or size is None or slot.index + slot.count > size:
            if is_scratch(slot.buffer):
                _refuse(op, f"{slot} is outside rank {slot.rank}'s scratch buffer {slot.buffer!r} ({size or 0} "
                            "chunks); declare it in Program.buffers")
            _refuse(op, f"{slot} is outside the {slot.buffer} buffer ({size} chunks per rank for {coll})")
    if src.rank != dst.rank and (src.rank, dst.rank) not in topo.link_map:
        _refuse(op, f"no link from rank {src.rank} to rank {dst.rank} in topology {topo.name}; route through a "
                    "neighbour or use a topology with that link")
    for label, hint in (("sendtb", op.sendtb), ("recvtb", op.recvtb), ("ch", op.channel)):
        if hint is not None and (not isinstance(hint, int) or hint < 0):
            _refuse(op, f"{label}={hint!r}: hints are integers >= 0 (or None for automatic)")


def _refuse(op: ChunkOp, message: str) -> None:
    raise ProgramError(f"{where(op.line, op.file)}{message}")
