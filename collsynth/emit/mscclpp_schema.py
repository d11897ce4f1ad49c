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

`check_plan(plan)` raises PlanSchemaError (one line: where, what, the fix) on the first violation: the keys,
types and fixed limits are a declared pydantic schema (`mscclpp_plan_schema.py`: unknown keys name the closest
known one); what relates one field to another (indices into other lists, ids in order) is checked here after it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from collsynth.core.errors import CollsynthError
from collsynth.emit.mscclpp_limits import (  # re-exported: the emitter and its tests import them from here
    MAX_BARRIERS,
    MAX_CHANNELS_PER_OP,
    MAX_CHANNELS_PER_TB,
    MAX_OPERATIONS_PER_TB,
    MAX_SEMAPHORES,
    MSCCLPP_VERSION,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

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


class PlanSchemaError(CollsynthError):
    """An execution plan the MSCCL++ executor would refuse or misread."""


# What a too-long list is limited by, by its key (the executor's fixed-size arrays)
LIST_LIMITS = {"ops": f"at most {MAX_OPERATIONS_PER_TB} per threadblock (MAX_OPERATION): split the threadblock",
               "channel_ids": f"at most {MAX_CHANNELS_PER_OP} per operation (MAX_CHANNEL_PER_OPERATION)",
               "src_buff": f"at most {MAX_CHANNELS_PER_OP} per op", "dst_buff": f"at most {MAX_CHANNELS_PER_OP} per op",
               "semaphores": f"at most {MAX_SEMAPHORES} per GPU (MAX_DEVICE_SEMAPHORES)"}


def check_plan(plan: Any) -> None:
    """Raise PlanSchemaError naming the first thing in `plan` the executor's parser cannot take: first the
    declared schema (keys, types, fixed limits: `mscclpp_plan_schema`), then what relates fields to each other."""
    from pydantic import ValidationError

    from collsynth.emit.mscclpp_plan_schema import PlanDocument

    if not isinstance(plan, Mapping):
        raise PlanSchemaError("an execution plan is a JSON object with name, collective, protocol, inplace, gpus")
    try:
        PlanDocument.model_validate(plan)
    except ValidationError as exc:
        raise PlanSchemaError(_describe(exc)) from None
    gpus = plan["gpus"]
    for rank, gpu in enumerate(gpus):
        _check_gpu(gpu, rank, len(gpus))


def _describe(exc: ValidationError) -> str:
    """One line for the first schema error: where, what, the fix."""
    from collsynth.core.schema import field_path, known_keys
    from collsynth.emit.mscclpp_plan_schema import PlanDocument

    first = exc.errors(include_url=False)[0]
    loc = tuple(first.get("loc", ()))
    kind, value = first.get("type", ""), first.get("input")
    where, key = field_path(loc[:-1]) or "plan", loc[-1] if loc else ""
    if kind == "missing":
        return f"{where}: missing key {key!r} (the MSCCL++ {MSCCLPP_VERSION} parser requires it)"
    if kind == "extra_forbidden":
        known = known_keys(PlanDocument, loc[:-1])
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        return f"{where}: unknown key {key!r} (the MSCCL++ {MSCCLPP_VERSION} parser does not read it); {hint}"
    if kind == "literal_error" and key == "name" and "ops" in loc:
        return f"{where}: unknown op {value!r} (the parser's ops: {', '.join(sorted(OP_NAMES))})"
    if kind == "too_long" and key in LIST_LIMITS:
        return f"{where}: {len(value)} {key}; {LIST_LIMITS[str(key)]}"
    if key == "barrier_id":
        return f"{where}: barrier_id {value!r} is out of range 0..{MAX_BARRIERS - 1} (MAX_DEVICE_SYNCERS)"
    message = first.get("msg", "invalid")
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return f"{where}.{key}: {message[0].lower() + message[1:]}, got {shown}; see docs/formats.md"


def _require(obj: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if obj.get(key) is None:
            raise PlanSchemaError(f"{where}: missing key {key!r} (the MSCCL++ {MSCCLPP_VERSION} parser requires it)")


def _index(value: int, limit: int, where: str, what: str) -> int:
    if not 0 <= value < limit:
        raise PlanSchemaError(f"{where}: {what} {value!r} is out of range 0..{limit - 1}")
    return value


def _check_gpu(gpu: Mapping[str, Any], rank: int, nranks: int) -> None:
    where = f"gpus[{rank}]"
    if gpu["id"] != rank:
        raise PlanSchemaError(f"{where}: id is {gpu['id']!r} but the executor reads gpus[rank] for rank {rank}")
    sizes = {"i": gpu["input_chunks"], "o": gpu["output_chunks"], "s": gpu["scratch_chunks"]}
    if sizes["i"] == 0 and sizes["o"] == 0:
        raise PlanSchemaError(f"{where}: input_chunks and output_chunks are both 0; the executor sizes chunks by them")
    channels = _gpu_channels(gpu, where, nranks)
    remote = gpu["remote_buffers"]
    for k, buffer in enumerate(remote):
        _index(buffer["rank"], nranks, f"{where}.remote_buffers[{k}]", "rank")
    semaphores = len(gpu.get("semaphores", []))
    tbs = gpu["threadblocks"]
    for t, tb in enumerate(tbs):
        _check_tb(tb, f"{where}.threadblocks[{t}]", t, channels, remote, sizes, semaphores, len(tbs))


def _gpu_channels(gpu: Mapping[str, Any], where: str, nranks: int) -> dict[str, int]:
    """Channels of each type on this GPU (memory/port: one per connected_to entry; switch: one per group)."""
    counts = dict.fromkeys(CHANNEL_TYPES, 0)
    for k, channel in enumerate(gpu["channels"]):
        at = f"{where}.channels[{k}]"
        kind = channel["channel_type"]
        if kind == "switch":
            _require(channel, ("buffer_type", "rank_groups"), at)
            for group in channel["rank_groups"]:
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


def _check_tb(tb: Mapping[str, Any], where: str, position: int, channels: dict[str, int], remote: list[Any],
              sizes: dict[str, int], semaphores: int, threadblocks: int) -> None:
    if tb["id"] != position:
        raise PlanSchemaError(f"{where}: id is {tb['id']!r}; threadblock ids must be 0..T-1 in order")
    tb_channels = dict.fromkeys(CHANNEL_TYPES, 0)
    for k, entry in enumerate(tb["channels"]):
        kind = entry["channel_type"]
        for cid in entry["channel_ids"]:
            _index(cid, channels[kind], f"{where}.channels[{k}]", f"{kind} channel id")
            tb_channels[kind] += 1
    for kind, count in tb_channels.items():
        if count > MAX_CHANNELS_PER_TB:
            raise PlanSchemaError(f"{where}: {count} {kind} channels; at most {MAX_CHANNELS_PER_TB} per threadblock")
    refs = dict.fromkeys(CHANNEL_TYPES, 0)
    for k, entry in enumerate(tb.get("remote_buffer_refs", [])):
        for bid in entry["remote_buffer_ids"]:
            _index(bid, len(remote), f"{where}.remote_buffer_refs[{k}]", "remote buffer id")
        refs[entry["access_channel_type"]] += len(entry["remote_buffer_ids"])
    for k, op in enumerate(tb["ops"]):
        _check_op(op, f"{where}.ops[{k}]", tb_channels, refs, sizes, semaphores, threadblocks)


def _check_op(op: Mapping[str, Any], where: str, tb_channels: dict[str, int], refs: dict[str, int],
              sizes: dict[str, int], semaphores: int, threadblocks: int) -> None:
    name = op["name"]
    if name in REFUSED_OPS:
        raise PlanSchemaError(f"{where}: {REFUSED_OPS[name]}")
    for key, why in REFUSED_KEYS.items():
        if key in op:
            raise PlanSchemaError(f"{where}: {why}")
    if name == "barrier":
        _require(op, ("barrier_id", "num_threadblocks"), where)
        _index(op["num_threadblocks"] - 1, threadblocks, where,
               "num_threadblocks - 1 (threadblocks on this GPU that meet at the barrier, minus one)")
    kind = op.get("channel_type", "none")
    for cid in op.get("channel_ids", []):
        _index(cid, tb_channels.get(kind, 0), where, f"{kind} channel id (into the threadblock's channels)")
    for side in ("src_buff", "dst_buff"):
        for k, buff in enumerate(op.get(side, [])):
            _check_buffer(buff, f"{where}.{side}[{k}]", kind, tb_channels, refs, sizes)
    for sid in op.get("semaphore_ids", []):
        _index(sid, semaphores, where, "semaphore id")


def _check_buffer(buff: Mapping[str, Any], at: str, kind: str, tb_channels: dict[str, int], refs: dict[str, int],
                  sizes: dict[str, int]) -> None:
    if buff.get("buffer_id") is not None:
        _index(buff["buffer_id"], refs.get(kind, 0), at, f"remote buffer id (into the {kind} refs)")
    elif buff.get("switch_channel_id") is not None:
        _index(buff["switch_channel_id"], tb_channels["switch"], at, "switch channel id")
    elif buff.get("type") is not None:
        limit = sizes[buff["type"]]
        if buff["index"] + buff["size"] > limit:
            raise PlanSchemaError(f"{at}: chunks [{buff['index']}, +{buff['size']}) are outside the "
                                  f"{buff['type']} buffer's {limit} chunks")
    else:
        raise PlanSchemaError(f"{at}: a buffer entry needs type, buffer_id or switch_channel_id")
