"""What the MSCCL and RCCL loaders accept, checked before anything is emitted or run.

`validate(ir)` raises IRError naming the limit, where it is broken (gpu / tb / step) and how to fix it.
The rules and their sources (the loaders in msccl-executor-nccl and RCCL, `msccl_parser.cc`, and the
interpreter kernel that consumes the parsed steps) are summarized in collsynth/emit/msccl_xml.py.

Beyond the loaders' own checks this also refuses what loads but cannot run correctly: a step waiting on
a step that never raises its flag (hasdep=0), two threadblocks driving one connection, a `nop` whose
dependency the loader would silently drop, buffer ranges that run past a buffer's end.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from collsynth.core.caps import CHUNKS, RANKS
from collsynth.core.errors import CollsynthError
from collsynth.core.steps import LOCAL_DST_TYPES, LOCAL_SRC_TYPES
from collsynth.ir import (
    BUFFERS,
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_STEPS_PER_TB,
    MAX_TBS_PER_CHANNEL,
    MSCCL_COLLECTIVES,
    NOP,
    PROTOCOLS,
    RECEIVING_TYPES,
    SENDING_TYPES,
    STEP_TYPES,
    Algo,
    Gpu,
    Step,
    Threadblock,
)
from collsynth.ir.table import NOP_CODE, RECEIVES, SENDS, TYPE_CODE, step_table

# The loaders' XML node table (msccl_parser.h MAX_NODES): one rank reads 1 algo + all gpu + its tb + its
# step elements into it.
MAX_XML_NODES = 4096
# Attribute values are read into fixed buffers (MAX_STR_LEN).
MAX_STR_LEN = 255
# Characters the loaders cannot read back in an attribute value: they do not decode XML entities.
_BAD_NAME_CHARS = set('"<>&\t\n\r')

# Which operands of a step are local buffer ranges the step reads or writes (the others are informational:
# a send's dst names the receiver's slot, a receive's src the sender's).


# Per step type: is it a nop, does it read a local src range, write a local dst range, send, receive.
_TYPE_ROLES = {kind: (kind == NOP, kind in LOCAL_SRC_TYPES, kind in LOCAL_DST_TYPES, kind in SENDING_TYPES,
                      kind in RECEIVING_TYPES) for kind in STEP_TYPES}


LOCAL_SRC = np.array([kind in LOCAL_SRC_TYPES for kind in TYPE_CODE] + [False])  # by type code (-1: last)
LOCAL_DST = np.array([kind in LOCAL_DST_TYPES for kind in TYPE_CODE] + [False])


class IRError(CollsynthError):
    """An IR the MSCCL/RCCL runtimes would refuse or run wrongly; the message says which limit and where."""


class CrowdedChannelError(IRError):
    """More threadblocks on one channel of a GPU than MSCCL runs there (`count` of them): a split over more
    channels can fix it (collsynth.compiler.split)."""

    def __init__(self, message: str, count: int) -> None:
        super().__init__(message)
        self.count = count


def validate(ir: Algo, *, max_steps_per_tb: int | None = MAX_STEPS_PER_TB) -> Algo:
    """Check every loader limit and structural rule; return the IR unchanged or raise IRError.
    `max_steps_per_tb`: MSCCL's default; None leaves the steps-per-threadblock limit to a runtime target's check
    (`compiler.split.target_violation`, `collsynth doctor`): target `none` has no such limit."""
    _check_algo(ir)
    # Every step's rules at once over the IR's columns (collsynth.ir.table). Where they all hold, the checks
    # below run without their step loops: their first failure is then the first failure of the full checks.
    # Where one fails (or a field is no integer), the full checks run and name the first failure.
    steps_ok = _steps_valid(ir)
    for position, gpu in enumerate(ir.gpus):
        _check_gpu(ir, position, gpu, max_steps_per_tb, steps_ok)
    return ir


def _steps_valid(ir: Algo) -> bool:
    """Whether every step passes _check_threadblock's step loop and _check_gpu's checks of waited steps (False
    also where the table cannot be read: the step-by-step checks then decide)."""
    try:
        t = step_table(ir)
    except (TypeError, ValueError, OverflowError):
        return False
    if t.s.size == 0:
        return True
    tb, kind, cnt, depid, deps = t.step_tb, t.type, t.cnt, t.depid, t.deps
    index = t.index
    if not (np.array_equal(t.s, index) and kind.min() >= 0 and t.srcbuf.min() >= 0 and t.dstbuf.min() >= 0):
        return False
    nop = kind == NOP_CODE
    if np.any(SENDS[kind] & (t.tb_send[tb] < 0)) or np.any(RECEIVES[kind] & (t.tb_recv[tb] < 0)):
        return False
    if np.any(cnt > MAX_COUNT) or np.any(cnt < np.where(nop, 0, 1)) or np.any(nop & (depid < 0)):
        return False
    gpu = t.tb_gpu[tb]
    sizes = np.array([(g.i_chunks, g.o_chunks, g.s_chunks) for g in ir.gpus], dtype=np.int64).reshape(-1, 3)
    for reads, buf, off in ((LOCAL_SRC[kind], t.srcbuf, t.srcoff), (LOCAL_DST[kind], t.dstbuf, t.dstoff)):
        if np.any(reads & ((off < 0) | (off > sizes[gpu, buf] - cnt))):
            return False
    waits = depid >= 0
    if np.any(~waits & ((depid != -1) | (deps != -1))):
        return False
    waiting = np.flatnonzero(waits)
    local, first = depid[waiting], t.gpu_first[gpu[waiting]]
    if np.any(local == t.tb_id[tb[waiting]]) or np.any(local >= t.gpu_first[gpu[waiting] + 1] - first):
        return False
    target = first + local
    lengths = np.diff(t.tb_first)
    step = deps[waiting]
    if np.any(step < 0) or np.any(step >= lengths[target]):
        return False
    waited = t.tb_first[target] + step
    if np.any(nop[waited]) or not t.hasdep[waited].all():
        return False
    # a run of nops is followed, in its threadblock, by a step with a dependency; no threadblock ends with one
    after_nop = np.flatnonzero(nop[:-1] & (tb[:-1] == tb[1:])) + 1
    if np.any(~nop[after_nop] & (depid[after_nop] < 0)):
        return False
    ends = t.tb_first[1:][lengths > 0] - 1
    return not nop[ends].any()



def _check_algo(ir: Algo) -> None:
    if not ir.name or len(ir.name) > MAX_STR_LEN or _BAD_NAME_CHARS & set(ir.name):
        raise IRError(f"algo name {ir.name!r}: must be 1..{MAX_STR_LEN} characters without quotes, <, >, &, "
                      "tabs or newlines (the MSCCL loader reads attribute values verbatim)")
    if ir.collective not in MSCCL_COLLECTIVES:
        hint = "reducescatter" if ir.collective.replace("_", "").replace("-", "").lower() == "reducescatter" \
            else "one of " + ", ".join(MSCCL_COLLECTIVES)
        raise IRError(f"algo coll={ir.collective!r} is not a spelling the MSCCL/RCCL loaders accept; use {hint} "
                      "(collsynth.ir.coll_spelling(name) maps any collective name)")
    if ir.proto not in PROTOCOLS:
        raise IRError(f"algo proto={ir.proto!r} is unknown; the loaders accept {', '.join(PROTOCOLS)}")
    if not 1 <= ir.nchannels <= MAX_CHANNELS:
        raise IRError(f"algo nchannels={ir.nchannels} is outside 1..{MAX_CHANNELS} (channels must be below "
                      f"{MAX_CHANNELS})")
    if ir.nchunksperloop < 1:
        raise IRError(f"algo nchunksperloop={ir.nchunksperloop} must be >= 1")
    CHUNKS.check(ir.nchunksperloop, "algo nchunksperloop", IRError)
    RANKS.check(ir.ngpus, "algo ngpus", IRError)
    if ir.ngpus < 1 or ir.ngpus != len(ir.gpus):
        raise IRError(f"algo ngpus={ir.ngpus} but the IR has {len(ir.gpus)} gpu elements; they must agree")
    if ir.min_bytes < 0 or ir.max_bytes < 0:
        raise IRError(f"algo minBytes={ir.min_bytes} maxBytes={ir.max_bytes}: sizes must be >= 0")
    if ir.max_bytes and ir.max_bytes < ir.min_bytes:
        raise IRError(f"algo maxBytes={ir.max_bytes} is below minBytes={ir.min_bytes} (0 means no upper limit)")


def _check_gpu(ir: Algo, position: int, gpu: Gpu, max_steps: int | None, steps_ok: bool = False) -> None:
    """The gpu's checks; `steps_ok`: its steps are known to pass theirs (_steps_valid), only the rest runs."""
    if gpu.id != position:
        raise IRError(f"gpu ids must be 0..ngpus-1 in order; found id {gpu.id} at position {position}")
    where = f"gpu {gpu.id}"
    for label, value in (("i_chunks", gpu.i_chunks), ("o_chunks", gpu.o_chunks), ("s_chunks", gpu.s_chunks)):
        if value < 0:
            raise IRError(f"{where}: {label}={value} must be >= 0")
        CHUNKS.check(value, f"{where}: {label}", IRError)
    lengths = [len(tb.steps) for tb in gpu.tbs]
    nodes = 1 + ir.ngpus + len(gpu.tbs) + sum(lengths)
    if nodes > MAX_XML_NODES:
        raise IRError(f"{where}: the loader reads {nodes} XML elements for this rank but its table holds "
                      f"{MAX_XML_NODES}; use fewer threadblocks/steps on this gpu")
    sizes = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
    connections: dict[tuple[str, int, int], int] = {}
    waited: set[tuple[int, int]] = set()
    for index, tb in enumerate(gpu.tbs):
        if tb.id != index:
            raise IRError(f"{where}: threadblock ids must be contiguous from 0; found tb {tb.id} at position "
                          f"{index}")
        _check_threadblock(ir, gpu, tb, sizes, connections, waited, max_steps, lengths, steps_ok)
    per_channel = Counter(tb.chan for tb in gpu.tbs)
    busiest = max(per_channel, key=lambda chan: per_channel[chan], default=None)
    if busiest is not None and per_channel[busiest] > MAX_TBS_PER_CHANNEL:
        raise CrowdedChannelError(f"{where}: {per_channel[busiest]} threadblocks on channel {busiest}, but MSCCL runs "
                                  f"at most {MAX_TBS_PER_CHANNEL} per channel; spread them over more channels",
                                  per_channel[busiest])
    for tb_id, step_index in sorted(waited):
        tb = gpu.tbs[tb_id]
        if tb.steps[step_index].type == NOP:
            raise IRError(f"{where} tb {tb_id} step {step_index}: another step waits on this nop, but nops publish no "
                          "flag in MSCCL (the loader folds them into the next step); wait on a real step")
        if not tb.steps[step_index].hasdep:
            raise IRError(f"{where} tb {tb_id} step {step_index}: another step waits on it but hasdep=0; the "
                          "runtime only raises the flag of steps marked hasdep=1 (set hasdep on every waited step)")


def _check_threadblock(ir: Algo, gpu: Gpu, tb: Threadblock, sizes: dict[str, int],
                       connections: dict[tuple[str, int, int], int], waited: set[tuple[int, int]],
                       max_steps: int | None, lengths: list[int], steps_ok: bool = False) -> None:
    where = f"gpu {gpu.id} tb {tb.id}"
    for label, peer in (("send", tb.send), ("recv", tb.recv)):
        if peer == gpu.id or not -1 <= peer < ir.ngpus:
            raise IRError(f"{where}: {label}={peer} must be -1 or another rank in 0..{ir.ngpus - 1}")
        if peer >= 0:
            other = connections.setdefault((label, peer, tb.chan), tb.id)
            if other != tb.id:
                raise IRError(f"{where}: tb {other} already uses the {label} connection with rank {peer} on channel "
                              f"{tb.chan}; one connection is driven by one threadblock (use another channel)")
    if not 0 <= tb.chan < MAX_CHANNELS:
        raise IRError(f"{where}: chan={tb.chan} is outside 0..{MAX_CHANNELS - 1} (channels must be below "
                      f"{MAX_CHANNELS})")
    if tb.chan >= ir.nchannels:
        raise IRError(f"{where}: chan={tb.chan} but the algo declares nchannels={ir.nchannels}; the runtime only "
                      "sets up channels below nchannels")
    if max_steps is not None and len(tb.steps) > max_steps:
        raise IRError(f"{where}: {len(tb.steps)} steps exceed the runtime limit of {max_steps} steps per "
                      "threadblock; spread the work over more threadblocks or channels")
    if steps_ok:
        return
    # The step types this threadblock may run (it has the peer they send to / receive from), each with its roles.
    roles: dict[str, tuple[bool, ...]] = {kind: role[:3] for kind, role in _TYPE_ROLES.items()
             if not (role[3] and tb.send < 0) and not (role[4] and tb.recv < 0)}
    me, ntbs = tb.id, len(lengths)
    pending_nop = -1  # the first step of a run of nops still waiting for the step the loader attaches them to
    for index, step in enumerate(tb.steps):
        # Every condition of _check_step at once, each field read once: where all hold, _check_step would
        # return None; where one fails, _check_step names it (the same message, in its order of checks).
        kind, cnt, depid, deps = step.type, step.cnt, step.depid, step.deps
        role = roles.get(kind) if isinstance(kind, str) else None  # (an unhashable type: _check_step names it)
        if role is not None and step.s == index and (srcbuf := step.srcbuf) in BUFFERS \
                and (dstbuf := step.dstbuf) in BUFFERS \
                and ((0 <= cnt <= MAX_COUNT and depid >= 0) if role[0] else 1 <= cnt <= MAX_COUNT) \
                and (not role[1] or 0 <= step.srcoff <= sizes[srcbuf] - cnt) \
                and (not role[2] or 0 <= step.dstoff <= sizes[dstbuf] - cnt) \
                and (depid == -1 and deps == -1 if depid < 0 else
                     depid != me and depid < ntbs and 0 <= deps < lengths[depid]):
            if depid >= 0:
                waited.add((depid, deps))
        else:
            problem = _check_step(gpu, tb, index, step, sizes, waited)
            if problem is not None:
                raise IRError(f"gpu {gpu.id} tb {tb.id} step {index}: {problem}")
        if kind == NOP:
            pending_nop = index if pending_nop < 0 else pending_nop
        else:
            if pending_nop >= 0 and depid < 0:
                raise IRError(f"{where} step {index}: follows nop step {pending_nop} but has no dependency itself; "
                              "the loader attaches a run of nops to the next step, which must carry the last "
                              "dependency (move one dependency from the nops onto this step)")
            pending_nop = -1
    if pending_nop >= 0:
        raise IRError(f"{where} step {pending_nop}: trailing nop; the loader drops nops that no later step "
                      "follows, so its dependency would never be waited on (remove it)")


def _check_step(gpu: Gpu, tb: Threadblock, index: int, step: Step, sizes: dict[str, int],
                waited: set[tuple[int, int]]) -> str | None:
    """What is wrong with the step, else None (the caller names the step: this runs for every step of the IR,
    so its place is formatted only on an error)."""
    if step.s != index:
        return f"step numbers must be contiguous from 0; found s={step.s}"
    if step.type not in STEP_TYPES:
        return f"unknown step type {step.type!r}; MSCCL knows {', '.join(STEP_TYPES)}"
    for label, buf in (("srcbuf", step.srcbuf), ("dstbuf", step.dstbuf)):
        if buf not in BUFFERS:
            return f"{label}={buf!r} is not a buffer; use i (input), o (output) or s (scratch)"
    if step.type == NOP:
        if not 0 <= step.cnt <= MAX_COUNT:
            return f"nop cnt={step.cnt} is outside 0..{MAX_COUNT}"
        if step.depid < 0:
            return "nop without a dependency; a nop only exists to carry one (remove it)"
    elif not 1 <= step.cnt <= MAX_COUNT:
        return (f"cnt={step.cnt} is outside 1..{MAX_COUNT} (MSCCL_MAX_COUNT); split the transfer "
                f"into steps of at most {MAX_COUNT} chunks")
    if step.type in SENDING_TYPES and tb.send < 0:
        return f"{step.type} sends but the threadblock has send=-1; give the tb a send peer"
    if step.type in RECEIVING_TYPES and tb.recv < 0:
        return f"{step.type} receives but the threadblock has recv=-1; give the tb a recv peer"
    if step.type in LOCAL_SRC_TYPES and not 0 <= step.srcoff <= sizes[step.srcbuf] - step.cnt:
        return _outside("src", step.srcbuf, step.srcoff, step.cnt, sizes)
    if step.type in LOCAL_DST_TYPES and not 0 <= step.dstoff <= sizes[step.dstbuf] - step.cnt:
        return _outside("dst", step.dstbuf, step.dstoff, step.cnt, sizes)
    if step.depid < 0:
        if step.depid != -1 or step.deps != -1:
            return f"depid={step.depid} deps={step.deps}; write -1/-1 for no dependency"
    else:
        if step.depid == tb.id:
            return "depends on its own threadblock; program order already orders it (drop the dep)"
        if step.depid >= len(gpu.tbs):
            return (f"depends on tb {step.depid}, which gpu {gpu.id} does not have "
                    f"({len(gpu.tbs)} threadblocks)")
        if not 0 <= step.deps < len(gpu.tbs[step.depid].steps):
            return (f"depends on tb {step.depid} step {step.deps}, which does not exist "
                    f"(tb {step.depid} has {len(gpu.tbs[step.depid].steps)} steps)")
        waited.add((step.depid, step.deps))
    return None


def _outside(label: str, buf: str, offset: int, count: int, sizes: dict[str, int]) -> str:
    return (f"{label} {buf}[{offset}:{offset + count}] runs outside the buffer of {sizes[buf]} chunks; raise the "
            f"gpu's {buf}_chunks or fix the offset")
