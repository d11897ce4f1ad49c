"""Chakra execution traces (ET) from an MSCCL-IR program: one `<prefix>.<rank>.et` per rank.

File layout (as Chakra's protolib `encodeMessage` writes it): a GlobalMetadata message, then one Node
message per operation, each preceded by its length as a varint32.

How IR steps become nodes (within a rank, every node data-depends on the node before it in its
threadblock, and a step's `(depid, deps)` adds a dependency on the last node of that step):

  s            COMM_SEND
  r            COMM_RECV
  rcs          COMM_RECV -> COMM_SEND
  rrs / rrcs   COMM_RECV -> COMM_SEND (the reduction streams with the transfer: no cost of its own)
  rrc          COMM_RECV
  cpy / re     COMP (a local copy / reduction)
  nop          COMP of duration 0 (keeps the synchronisation point; the model charges a nop nothing)

The metadata carries the collective's `comm_size` as ASTRA-sim reads it for a collective: each rank's input in
bytes (for an AllGather the per-rank input, 1/ngpus of the gathered output `nbytes`).
COMM nodes carry `comm_src`, `comm_dst` (int32), `comm_size` (int64, bytes) and `comm_tag` (int32) as
Chakra's feeder reads them, plus `is_cpu_op` = false. A message is the k-th on its connection (sender,
receiver, channel) -- the MSCCL runtime matches sends and receives in FIFO order per connection -- and its
tag is `k * 32 + channel` (channels < 32), the same on the send and the receive. Sizes: the per-rank
buffer of `nbytes` is cut into `nchunksperloop` chunks of `nbytes // nchunksperloop` bytes, and a step
moves `cnt` chunks; the MSCCL tile loop is not unrolled, so a COMP node carries what the simulator charges the
step over the whole loop (collsynth.core.costs: `ntiles * alpha + cnt * chunk MiB * beta`, the same table the
simulator uses). Chakra's field is whole microseconds (`duration_micros`, uint64): we round UP, so no step with a
cost becomes 0 (over-charge < 1 us per node); the exact value is also written as the attribute `duration_nanos`
(uint64, ns, rounded to nearest). COMP nodes also carry `tensor_size` (bytes). Nodes are numbered per rank in an order
where every dependency comes first, so the data dependencies are acyclic by construction.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from collsynth.core.costs import MIB, local_step_us, tiles
from collsynth.core.errors import CollsynthError
from collsynth.core.files import write_atomic
from collsynth.emit import chakra_schema as et
from collsynth.ir import MAX_CHANNELS, RECEIVING_TYPES, SENDING_TYPES, STEP_TYPES, Algo

SCHEMA_VERSION = "0.0.4"
MB = MIB  # the cost model's unit (collsynth.core.costs)


_SMALL_VARINTS = tuple(bytes((i,)) for i in range(0x80))
# Every one- and two-byte varint (0 .. 2^14 - 1), looked up: a rank's node ids, lengths and dependencies are
# nearly all below 2^14, and a 1024-rank trace writes millions of them.
_VARINTS = _SMALL_VARINTS + tuple(bytes((0x80 | (i & 0x7F), i >> 7)) for i in range(0x80, 0x4000))


class ChakraError(CollsynthError):
    """An IR that cannot be exported, or a file that is not a Chakra trace."""


# --- writing -----------------------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_VARINTS[value]
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _delimited(payload: bytes) -> bytes:
    return _varint(len(payload)) + payload


def node_head(node_id: int, name: str, data_deps: Sequence[int]) -> bytes:
    """`Node(id=node_id, name=name, data_deps=data_deps).SerializeToString()`, encoded here: a 1024-rank trace has
    millions of nodes, and building a protobuf message for each costs more than the rest of the export. Fields in
    number order, as protobuf writes them: id (1, varint; left out when 0, proto3's default), name (2,
    length-delimited UTF-8; left out when empty), data_deps (5, packed varints; left out when empty)."""
    text = name.encode()
    parts = [b"\x08", _varint_of(node_id)] if node_id else []
    if text:
        parts += (b"\x12", _varint_of(len(text)), text)
    if data_deps:
        packed = b"".join([_varint_of(dep) for dep in data_deps])
        parts += (b"\x2a", _varint_of(len(packed)), packed)
    return b"".join(parts)


def _varint_of(value: int) -> bytes:
    return _VARINTS[value] if value < 0x4000 else _varint(value)


def _attr_bytes(**attrs: tuple[str, object]) -> bytes:
    """Serialized `Node.attr` entries alone: protobuf parsing merges concatenated encodings of one message
    (repeated fields append), so constant attributes are serialized once and appended to every node."""
    node = et.Node()
    for name, (kind, value) in attrs.items():
        node.attr.add(name=name, **{kind: value})
    return node.SerializeToString()


def _message_tags(ir: Algo) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(rank, tb id) -> per step: (send tag, receive tag), -1 where the step does not send / receive.
    Checks that every connection has one sending and one receiving threadblock and as many of each."""
    send_owner: dict[tuple[int, int, int], int] = {}
    recv_owner: dict[tuple[int, int, int], int] = {}
    sent: dict[tuple[int, int, int], int] = {}
    received: dict[tuple[int, int, int], int] = {}
    tags: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            where = f"IR {ir.name!r} gpu {gpu.id} tb {tb.id}"
            if not 0 <= tb.chan < MAX_CHANNELS:
                raise ChakraError(f"{where}: channel {tb.chan} is outside 0..{MAX_CHANNELS - 1}")
            send_key = (gpu.id, tb.send, tb.chan)
            recv_key = (tb.recv, gpu.id, tb.chan)
            per_step = []
            for step in tb.steps:
                if step.type not in STEP_TYPES:
                    raise ChakraError(f"{where} step {step.s}: unknown step type {step.type!r}; "
                                      f"known: {' '.join(STEP_TYPES)}")
                send_tag = recv_tag = -1
                if step.type in SENDING_TYPES:
                    if not 0 <= tb.send < ir.ngpus:
                        raise ChakraError(f"{where}: has sending steps but send peer {tb.send}")
                    if send_owner.setdefault(send_key, tb.id) != tb.id:
                        raise ChakraError(f"{where}: shares send connection {gpu.id}->{tb.send} channel {tb.chan} "
                                          f"with tb {send_owner[send_key]}; give each tb its own (peer, channel)")
                    k = sent.get(send_key, 0)
                    sent[send_key] = k + 1
                    send_tag = k * MAX_CHANNELS + tb.chan
                if step.type in RECEIVING_TYPES:
                    if not 0 <= tb.recv < ir.ngpus:
                        raise ChakraError(f"{where}: has receiving steps but recv peer {tb.recv}")
                    if recv_owner.setdefault(recv_key, tb.id) != tb.id:
                        raise ChakraError(f"{where}: shares receive connection {tb.recv}->{gpu.id} channel "
                                          f"{tb.chan} with tb {recv_owner[recv_key]}; give each tb its own "
                                          "(peer, channel)")
                    k = received.get(recv_key, 0)
                    received[recv_key] = k + 1
                    recv_tag = k * MAX_CHANNELS + tb.chan
                per_step.append((send_tag, recv_tag))
            tags[(gpu.id, tb.id)] = per_step
    for key in set(sent) | set(received):
        if sent.get(key, 0) != received.get(key, 0):
            raise ChakraError(f"IR {ir.name!r}: connection {key[0]}->{key[1]} channel {key[2]} has "
                              f"{sent.get(key, 0)} sends but {received.get(key, 0)} receives; every send needs "
                              "exactly one matching receive")
    return tags


def _topological_steps(ir: Algo, gpu_index: int) -> list[tuple[int, int, int, int]]:
    """(tb position, step position, dependency's tb position or -1, its step position) of one GPU's steps,
    in an order where each step follows its threadblock's previous step and its (depid, deps) dependency."""
    gpu = ir.gpus[gpu_index]
    tb_pos = {tb.id: i for i, tb in enumerate(gpu.tbs)}
    step_pos = [{step.s: j for j, step in enumerate(tb.steps)} for tb in gpu.tbs]
    deps: list[list[tuple[int, int]]] = []
    for tb in gpu.tbs:
        row = []
        for step in tb.steps:
            if step.depid < 0:
                row.append((-1, -1))
                continue
            where = f"IR {ir.name!r} gpu {gpu.id} tb {tb.id} step {step.s}"
            if step.depid not in tb_pos:
                raise ChakraError(f"{where}: depends on tb {step.depid}, which gpu {gpu.id} does not have")
            target = tb_pos[step.depid]
            if step.deps not in step_pos[target]:
                raise ChakraError(f"{where}: depends on step {step.deps} of tb {step.depid}, which does not exist")
            row.append((target, step_pos[target][step.deps]))
        deps.append(row)
    next_step = [0] * len(gpu.tbs)
    order: list[tuple[int, int, int, int]] = []
    remaining = sum(len(tb.steps) for tb in gpu.tbs)
    while remaining:
        progressed = False
        for i, tb in enumerate(gpu.tbs):
            while next_step[i] < len(tb.steps):
                j = next_step[i]
                dep_tb, dep_step = deps[i][j]
                if dep_tb >= 0 and next_step[dep_tb] <= dep_step:
                    break  # its dependency is not placed yet
                order.append((i, j, dep_tb, dep_step))
                next_step[i] = j + 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [f"tb {tb.id} step {tb.steps[next_step[i]].s}" for i, tb in enumerate(gpu.tbs)
                     if next_step[i] < len(tb.steps)]
            raise ChakraError(f"IR {ir.name!r} gpu {gpu.id}: the step dependencies form a cycle through "
                              f"{', '.join(stuck[:4])}; fix depid/deps")
    return order


def _rank_trace(ir: Algo, gpu_index: int, nbytes: int, tags: dict[tuple[int, int], list[tuple[int, int]]]) -> bytes:
    """The whole `.et` file of one rank, as bytes."""
    gpu = ir.gpus[gpu_index]
    rank = gpu.id
    chunk_bytes = nbytes // ir.nchunksperloop
    metadata = et.GlobalMetadata(version=SCHEMA_VERSION)
    for name, kind, value in (("algorithm", "string_val", ir.name), ("collective", "string_val", ir.collective),
                              ("protocol", "string_val", ir.proto), ("ngpus", "int32_val", ir.ngpus),
                              ("rank", "int32_val", rank), ("nbytes", "int64_val", nbytes),
                              ("nchunksperloop", "int32_val", ir.nchunksperloop),
                              ("comm_size", "int64_val", input_bytes(ir, nbytes)),
                              ("exporter", "string_val", "collsynth")):
        metadata.attr.add(name=name, **{kind: value})
    out = [_delimited(metadata.SerializeToString())]

    send_type = et.Node(type=et.COMM_SEND_NODE).SerializeToString()
    recv_type = et.Node(type=et.COMM_RECV_NODE).SerializeToString()
    comp_type = et.Node(type=et.COMP_NODE).SerializeToString()
    not_cpu = _attr_bytes(is_cpu_op=("bool_val", False))
    static_comm: dict[tuple[int, int, int, int], bytes] = {}  # (src, dst, cnt, is_send) -> constant part
    static_comp: dict[tuple[str, int], bytes] = {}  # (kind, cnt) -> constant part
    tag_attrs: dict[int, bytes] = {}  # comm_tag -> its serialized attribute
    Node = et.Node

    def tag_attr(tag: int) -> bytes:
        if tag not in tag_attrs:
            tag_attrs[tag] = _attr_bytes(comm_tag=("int32_val", tag))
        return tag_attrs[tag]

    def comm_static(src: int, dst: int, cnt: int, is_send: int) -> bytes:
        key = (src, dst, cnt, is_send)
        if key not in static_comm:
            static_comm[key] = (send_type if is_send else recv_type) + not_cpu + _attr_bytes(
                comm_src=("int32_val", src), comm_dst=("int32_val", dst), comm_size=("int64_val", cnt * chunk_bytes))
        return static_comm[key]

    ntiles = tiles(chunk_bytes, ir.proto)

    def comp_static(kind: str, cnt: int) -> bytes:
        key = (kind, cnt)
        if key not in static_comp:
            size = cnt * chunk_bytes
            cost_us = 0.0 if kind == "nop" else local_step_us(kind, cnt, chunk_bytes, ntiles)
            static_comp[key] = (comp_type + not_cpu + Node(duration_micros=math.ceil(cost_us)).SerializeToString()
                                + _attr_bytes(tensor_size=("uint64_val", 0 if kind == "nop" else size),
                                              duration_nanos=("uint64_val", round(cost_us * 1000))))
        return static_comp[key]

    def emit(head: bytes, attrs: bytes, more: bytes) -> None:
        # one Node message, length-prefixed; its parts are joined once, with the whole file
        out.extend((_varint_of(len(head) + len(attrs) + len(more)), head, attrs, more))

    last_node: list[list[int]] = [[-1] * len(tb.steps) for tb in gpu.tbs]  # last node id of each step
    prev_in_tb = [-1] * len(gpu.tbs)
    next_id = 0
    for i, j, dep_tb, dep_step in _topological_steps(ir, gpu_index):
        tb = gpu.tbs[i]
        step = tb.steps[j]
        kind, cnt = step.type, step.cnt
        send_tag, recv_tag = tags[(rank, tb.id)][j]
        parents = [prev_in_tb[i]] if prev_in_tb[i] >= 0 else []
        if dep_tb >= 0 and last_node[dep_tb][dep_step] not in parents:
            parents.append(last_node[dep_tb][dep_step])
        label = f"{kind} tb{tb.id} s{step.s} "
        if recv_tag >= 0:
            emit(node_head(next_id, label + "recv", parents), tag_attr(recv_tag), comm_static(tb.recv, rank, cnt, 0))
            parents = [next_id]
            next_id += 1
        if kind in ("cpy", "re", "nop"):
            emit(node_head(next_id, label + kind, parents), comp_static(kind, cnt), b"")
            parents = [next_id]
            next_id += 1
        if send_tag >= 0:
            emit(node_head(next_id, label + "send", parents), tag_attr(send_tag), comm_static(rank, tb.send, cnt, 1))
            next_id += 1
        last_node[i][j] = next_id - 1
        prev_in_tb[i] = next_id - 1
    return b"".join(out)


def input_bytes(ir: Algo, nbytes: int) -> int:
    """The collective's size as ASTRA-sim reads a collective's `comm_size`: each rank's input. `nbytes` is the
    larger per-rank buffer (nccl-tests' size column), which for an AllGather is the gathered output, ngpus
    times the input."""
    return nbytes // ir.ngpus if ir.collective == "allgather" else nbytes


def export_chakra(ir: Algo, out_dir: str | os.PathLike[str], prefix: str = "ir", nbytes: int = MB) -> list[Path]:
    """Write `<prefix>.<rank>.et` for every rank of `ir` into `out_dir`; `nbytes` is the per-rank buffer
    size (nccl-tests' size column). Returns the paths, in rank order. Every file is built before any is
    written, and each is written to a temporary file and renamed into place."""
    if nbytes < 0:
        raise ChakraError(f"nbytes must be >= 0, got {nbytes}")
    if ir.nchunksperloop < 1:
        raise ChakraError(f"IR {ir.name!r}: nchunksperloop is {ir.nchunksperloop}; it must be >= 1")
    if not prefix or any(sep in prefix for sep in ("/", "\\")) or prefix.startswith("."):
        raise ChakraError(f"prefix {prefix!r} must be a plain file-name stem such as 'ir' or 'ring_allreduce'")
    ranks = [gpu.id for gpu in ir.gpus]
    if len(set(ranks)) != len(ranks):
        raise ChakraError(f"IR {ir.name!r}: two GPUs share one id; each rank needs its own gpu id")
    tags = _message_tags(ir)
    traces = [_rank_trace(ir, index, nbytes, tags) for index in range(len(ir.gpus))]
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ChakraError(f"cannot create output directory {directory} ({exc.strerror})") from None
    paths = []
    for rank, data in zip(ranks, traces, strict=True):
        path = directory / f"{prefix}.{rank}.et"
        try:
            write_atomic(path, data)
        except OSError as exc:
            raise ChakraError(f"cannot write {path} ({exc.strerror})") from None
        paths.append(path)
    return paths


# --- reading -------------------------------------------------------------------------------------------

def _read_varint(data: bytes, pos: int, path: object) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ChakraError(f"{path}: truncated length prefix at byte {pos}; the file is not a complete Chakra ET")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise ChakraError(f"{path}: bad length prefix at byte {pos}; the file is not a Chakra ET")


def read_chakra(path: str | os.PathLike[str]) -> tuple[object, list[object]]:
    """(GlobalMetadata, [Node, ...]) from one `.et` file written in the varint32-delimited layout."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ChakraError(f"{path}: cannot read ({exc.strerror})") from None
    messages: list[bytes] = []
    pos = 0
    while pos < len(data):
        size, pos = _read_varint(data, pos, path)
        if pos + size > len(data):
            raise ChakraError(f"{path}: a message of {size} bytes runs past the end of the file; it is truncated")
        messages.append(data[pos:pos + size])
        pos += size
    if not messages:
        raise ChakraError(f"{path}: empty file; a Chakra ET starts with a GlobalMetadata message")
    # chakra_schema's classes come from protobuf's message_factory (no stubs: typed there as plain `type`)
    try:
        metadata = et.GlobalMetadata.FromString(messages[0])  # type: ignore[attr-defined]
        nodes = [et.Node.FromString(blob) for blob in messages[1:]]  # type: ignore[attr-defined]
    except Exception as exc:  # protobuf's DecodeError
        raise ChakraError(f"{path}: not a Chakra ET ({exc})") from None
    return metadata, nodes


def node_attrs(node: object) -> dict[str, object]:
    """A node's attributes as {name: value} (whichever oneof value each carries)."""
    result = {}
    for attr in node.attr:  # type: ignore[attr-defined]
        which = attr.WhichOneof("value")
        result[attr.name] = getattr(attr, which) if which else None
    return result


def trace_paths(out_dir: str | os.PathLike[str], prefix: str, ranks: Sequence[int]) -> list[Path]:
    """The file names `export_chakra` uses."""
    return [Path(out_dir) / f"{prefix}.{rank}.et" for rank in ranks]


def write_trace(path: str | os.PathLike[str], metadata: object, nodes: Sequence[object]) -> Path:
    """Write a GlobalMetadata and Node messages (e.g. from `read_chakra`) as one `.et` file, atomically."""
    target = Path(path)
    data = b"".join(_delimited(message.SerializeToString()) for message in (metadata, *nodes))  # type: ignore
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise ChakraError(f"cannot write {target} ({exc.strerror})") from None
    return target
