"""The schema check of an MSCCL++ execution plan, written from the executor's parser rules.

Pinned target: MSCCL++ 0.9.x (microsoft/mscclpp, `src/core/executor/execution_plan.cc` parses,
`src/include/execution_common.hpp` sets the limits; format summarized in docs/formats.md). What the parser
requires and what the executor's fixed-size arrays allow, in our words:

* top level: `name`, `collective`, `protocol` ("LL" turns packet mode on, anything else is Simple),
  `inplace`, `gpus` (indexed by rank: `gpus[r]["id"]` must be r); optional `reuse_resources`,
  `use_double_scratch_buffer`, `buffer_alignment` (16), `min_message_size`, `max_message_size`,
  `num_threads_per_block` (1024).
* per GPU: `id`, `input_chunks`, `output_chunks`, `scratch_chunks`, `threadblocks`, `channels`,
  `remote_buffers`; `semaphores` optional. A memory/port channel entry lists peers in `connected_to` (one
  channel per entry, numbered per type in order); a switch entry has `buffer_type` and `rank_groups`
  (`size`, `ranks`). A remote buffer is `rank`, `type` (i/o/s), `access_channel_types`.
* per threadblock: `id` (0..T-1), `ops`, `channels` (`channel_type`, `channel_ids` into the GPU's channels
  of that type) and optional `remote_buffer_refs` (`access_channel_type`, `remote_buffer_ids`).
* per op: `name` from the parser's list; `channel_ids` index the threadblock's channels of the op's
  `channel_type`; a local buffer entry is `type`, `index`, `size`; a remote one `buffer_id` (into the
  threadblock's refs for the op's channel type), `index`, `size`; a switch one `switch_channel_id`.
* limits (execution_common.hpp): 64 operations per threadblock (MAX_OPERATION), 16 channels of a type per
  threadblock (MAX_CHANNEL), 8 channels per operation (MAX_CHANNEL_PER_OPERATION), 16 device semaphores per
  GPU (MAX_DEVICE_SEMAPHORES); and input_chunks/output_chunks must be positive where a buffer is addressed.

* refused here although the executor takes them: `pipeline` ops and `tbg_info` (both slice a chunk by bytes,
  which collsynth's whole-chunk interpreter cannot check); a `barrier` needs `barrier_id` < 16
  (MAX_DEVICE_SYNCERS) and 1 <= `num_threadblocks` <= the GPU's threadblocks.

`check_plan(plan)` raises PlanSchemaError (one line: where, what, the fix) on the first violation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collsynth.core.errors import CollsynthError

MSCCLPP_VERSION = "0.9.x"
MAX_OPERATIONS_PER_TB = 64  # MAX_OPERATION
MAX_CHANNELS_PER_TB = 16  # MAX_CHANNEL (per channel type)
MAX_CHANNELS_PER_OP = 8  # MAX_CHANNEL_PER_OPERATION
MAX_SEMAPHORES = 16  # MAX_DEVICE_SEMAPHORES
MAX_BARRIERS = 16  # MAX_DEVICE_SYNCERS (barrier_id indexes the device syncers)
# Accepted by the executor but refused here, each with why: collsynth's plan interpreter runs whole chunks,
# and these two slice a chunk by bytes (so what they do depends on the message size).
REFUSED_OPS = {"pipeline": "a pipeline op loops its inner ops over byte-sized units of a chunk (iter_context); "
                           "collsynth checks whole-chunk plans only: unroll the loop into chunks"}
REFUSED_KEYS = {"tbg_info": "tbg_info splits an op's chunks by bytes across a threadblock group; collsynth checks "
                            "whole-chunk plans only: give each threadblock its own chunks"}

OP_NAMES = frozenset({
    "nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre", "rres",
    "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore", "rlxsignal",
    "rlxwait", "pipeline", "sem_acquire", "sem_release",
})
CHANNEL_TYPES = ("memory", "port", "switch", "none")
BUFFER_TYPES = ("i", "o", "s")
TOP_KEYS = ("name", "collective", "protocol", "inplace", "gpus")
GPU_KEYS = ("id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels", "remote_buffers")


class PlanSchemaError(CollsynthError):
    """An execution plan the MSCCL++ executor would refuse or misread."""


def check_plan(plan: Any) -> None:
    """Raise PlanSchemaError naming the first thing in `plan` the executor's parser cannot take."""
    if not isinstance(plan, Mapping):
        raise PlanSchemaError("an execution plan is a JSON object with name, collective, protocol, inplace, gpus")
    _require(plan, TOP_KEYS, "plan")
    gpus = plan["gpus"]
    if not isinstance(gpus, list) or not gpus:
        raise PlanSchemaError("plan: 'gpus' must be a non-empty list, one entry per rank")
    nranks = len(gpus)
    for rank, gpu in enumerate(gpus):
        _check_gpu(gpu, rank, nranks)


def _require(obj: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(obj, Mapping):
        raise PlanSchemaError(f"{where}: expected a JSON object")
    for key in keys:
        if key not in obj:
            raise PlanSchemaError(f"{where}: missing key {key!r} (the MSCCL++ {MSCCLPP_VERSION} parser requires it)")


def _index(value: Any, limit: int, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise PlanSchemaError(f"{where}: {what} {value!r} is out of range 0..{limit - 1}")
    return value


def _check_gpu(gpu: Any, rank: int, nranks: int) -> None:
    where = f"gpus[{rank}]"
    _require(gpu, GPU_KEYS, where)
    if gpu["id"] != rank:
        raise PlanSchemaError(f"{where}: id is {gpu['id']!r} but the executor reads gpus[rank] for rank {rank}")
    sizes = {}
    for buf, key in (("i", "input_chunks"), ("o", "output_chunks"), ("s", "scratch_chunks")):
        value = gpu[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PlanSchemaError(f"{where}: {key} must be a whole number >= 0, got {value!r}")
        sizes[buf] = value
    if sizes["i"] == 0 and sizes["o"] == 0:
        raise PlanSchemaError(f"{where}: input_chunks and output_chunks are both 0; the executor sizes chunks by them")
    channels = _gpu_channels(gpu, where, nranks)
    remote = gpu["remote_buffers"]
    if not isinstance(remote, list):
        raise PlanSchemaError(f"{where}: remote_buffers must be a list")
    for k, buffer in enumerate(remote):
        _require(buffer, ("rank", "type", "access_channel_types"), f"{where}.remote_buffers[{k}]")
        _index(buffer["rank"], nranks, f"{where}.remote_buffers[{k}]", "rank")
        if buffer["type"] not in BUFFER_TYPES:
            raise PlanSchemaError(f"{where}.remote_buffers[{k}]: type {buffer['type']!r} is not one of i, o, s")
    semaphores = gpu.get("semaphores", [])
    if not isinstance(semaphores, list) or len(semaphores) > MAX_SEMAPHORES:
        raise PlanSchemaError(f"{where}: semaphores must be a list of at most {MAX_SEMAPHORES} (MAX_DEVICE_SEMAPHORES)")
    for k, sem in enumerate(semaphores):
        _require(sem, ("init_value",), f"{where}.semaphores[{k}]")
    tbs = gpu["threadblocks"]
    if not isinstance(tbs, list):
        raise PlanSchemaError(f"{where}: threadblocks must be a list")
    for t, tb in enumerate(tbs):
        _check_tb(tb, f"{where}.threadblocks[{t}]", t, channels, remote, sizes, len(semaphores), len(tbs))


def _gpu_channels(gpu: Mapping[str, Any], where: str, nranks: int) -> dict[str, int]:
    """Channels of each type on this GPU (memory/port: one per connected_to entry; switch: one per group)."""
    counts = dict.fromkeys(CHANNEL_TYPES, 0)
    if not isinstance(gpu["channels"], list):
        raise PlanSchemaError(f"{where}: channels must be a list")
    for k, channel in enumerate(gpu["channels"]):
        at = f"{where}.channels[{k}]"
        _require(channel, ("channel_type",), at)
        kind = channel["channel_type"]
        if kind not in CHANNEL_TYPES:
            raise PlanSchemaError(f"{at}: channel_type {kind!r} is not one of {', '.join(CHANNEL_TYPES)}")
        if kind == "switch":
            _require(channel, ("buffer_type", "rank_groups"), at)
            if channel["buffer_type"] not in BUFFER_TYPES:
                raise PlanSchemaError(f"{at}: buffer_type {channel['buffer_type']!r} is not one of i, o, s")
            for group in channel["rank_groups"]:
                _require(group, ("size", "ranks"), f"{at}.rank_groups")
                for peer in group["ranks"]:
                    _index(peer, nranks, f"{at}.rank_groups", "rank")
                counts[kind] += 1
        else:
            _require(channel, ("connected_to",), at)
            for peer in channel["connected_to"]:
                _index(peer, nranks, at, "peer")
                if peer == gpu["id"]:
                    raise PlanSchemaError(f"{at}: a channel connects rank {peer} to itself; name another rank")
                counts[kind] += 1
    return counts


def _check_tb(tb: Any, where: str, position: int, channels: dict[str, int], remote: list[Any],
              sizes: dict[str, int], semaphores: int, threadblocks: int) -> None:
    _require(tb, ("id", "ops", "channels"), where)
    if tb["id"] != position:
        raise PlanSchemaError(f"{where}: id is {tb['id']!r}; threadblock ids must be 0..T-1 in order")
    ops = tb["ops"]
    if not isinstance(ops, list) or len(ops) > MAX_OPERATIONS_PER_TB:
        raise PlanSchemaError(f"{where}: {len(ops) if isinstance(ops, list) else 'no'} ops; at most "
                              f"{MAX_OPERATIONS_PER_TB} per threadblock (MAX_OPERATION): split the threadblock")
    tb_channels = dict.fromkeys(CHANNEL_TYPES, 0)
    for k, entry in enumerate(tb["channels"]):
        _require(entry, ("channel_type", "channel_ids"), f"{where}.channels[{k}]")
        kind = entry["channel_type"]
        if kind not in CHANNEL_TYPES:
            raise PlanSchemaError(f"{where}.channels[{k}]: channel_type {kind!r} is not one of memory, port, switch")
        for cid in entry["channel_ids"]:
            _index(cid, channels[kind], f"{where}.channels[{k}]", f"{kind} channel id")
            tb_channels[kind] += 1
    for kind, count in tb_channels.items():
        if count > MAX_CHANNELS_PER_TB:
            raise PlanSchemaError(f"{where}: {count} {kind} channels; at most {MAX_CHANNELS_PER_TB} per threadblock")
    refs = dict.fromkeys(CHANNEL_TYPES, 0)
    for k, entry in enumerate(tb.get("remote_buffer_refs", [])):
        _require(entry, ("access_channel_type", "remote_buffer_ids"), f"{where}.remote_buffer_refs[{k}]")
        for bid in entry["remote_buffer_ids"]:
            _index(bid, len(remote), f"{where}.remote_buffer_refs[{k}]", "remote buffer id")
        refs[entry["access_channel_type"]] = refs.get(entry["access_channel_type"], 0) + len(entry["remote_buffer_ids"])
    for k, op in enumerate(ops):
        _check_op(op, f"{where}.ops[{k}]", tb_channels, refs, sizes, semaphores, threadblocks)


def _check_op(op: Any, where: str, tb_channels: dict[str, int], refs: dict[str, int], sizes: dict[str, int],
              semaphores: int, threadblocks: int) -> None:
    _require(op, ("name",), where)
    name = op["name"]
    if name not in OP_NAMES:
        raise PlanSchemaError(f"{where}: unknown op {name!r} (the parser's ops: {', '.join(sorted(OP_NAMES))})")
    if name in REFUSED_OPS:
        raise PlanSchemaError(f"{where}: {REFUSED_OPS[name]}")
    for key, why in REFUSED_KEYS.items():
        if key in op:
            raise PlanSchemaError(f"{where}: {why}")
    if name == "barrier":
        _require(op, ("barrier_id", "num_threadblocks"), where)
        _index(op["barrier_id"], MAX_BARRIERS, where, "barrier_id (MAX_DEVICE_SYNCERS)")
        _index(op["num_threadblocks"] - 1 if isinstance(op["num_threadblocks"], int) else None, threadblocks, where,
               "num_threadblocks - 1 (threadblocks on this GPU that meet at the barrier, minus one)")
    kind = op.get("channel_type", "none")
    if kind not in CHANNEL_TYPES:
        raise PlanSchemaError(f"{where}: channel_type {kind!r} is not one of memory, port, switch, none")
    ids = op.get("channel_ids", [])
    if len(ids) > MAX_CHANNELS_PER_OP:
        raise PlanSchemaError(f"{where}: {len(ids)} channels; at most {MAX_CHANNELS_PER_OP} per operation")
    for cid in ids:
        _index(cid, tb_channels.get(kind, 0), where, f"{kind} channel id (into the threadblock's channels)")
    for side in ("src_buff", "dst_buff"):
        if len(op.get(side, [])) > MAX_CHANNELS_PER_OP:
            raise PlanSchemaError(f"{where}: {len(op[side])} {side} entries; at most {MAX_CHANNELS_PER_OP} per op")
        for k, buff in enumerate(op.get(side, [])):
            at = f"{where}.{side}[{k}]"
            _require(buff, ("index", "size"), at)
            if "buffer_id" in buff:
                _index(buff["buffer_id"], refs.get(kind, 0), at, f"remote buffer id (into the {kind} refs)")
            elif "switch_channel_id" in buff:
                _index(buff["switch_channel_id"], tb_channels["switch"], at, "switch channel id")
            elif "type" in buff:
                if buff["type"] not in BUFFER_TYPES:
                    raise PlanSchemaError(f"{at}: type {buff['type']!r} is not one of i, o, s")
                limit = sizes[buff["type"]]
                if not (isinstance(buff["index"], int) and isinstance(buff["size"], int) and buff["size"] >= 1
                        and buff["index"] >= 0 and buff["index"] + buff["size"] <= limit):
                    raise PlanSchemaError(f"{at}: chunks [{buff['index']}, +{buff['size']}) are outside the "
                                          f"{buff['type']} buffer's {limit} chunks")
            else:
                raise PlanSchemaError(f"{at}: a buffer entry needs type, buffer_id or switch_channel_id")
    for sid in op.get("semaphore_ids", []):
        _index(sid, semaphores, where, "semaphore id")
