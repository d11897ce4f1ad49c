"""Peephole passes over one rank's plan ops (per threadblock, before splitting), as MSCCL++'s own plans do:

* `read_packets_in_place`: an `upkt` that only unpacks received packets into a scratch slot that nothing but
  `re` ops read is dropped, and those reads become `repkt` reading the packets where they landed (repkt polls
  the packets' flags itself, so no ordering is lost);
* `fuse_reductions`: adjacent reductions into the same destination (`re` + `re`, `repkt` + `repkt`, each
  accumulating into its own destination) become one reduction over all their sources, up to the executor's
  8 buffers per operation.
Both keep the plan's result; the plan interpreter checks every plan after them. Operands meet by bytes, as in
the executor: a packet operand's offset is doubled.
"""

from __future__ import annotations

from typing import Any

from collsynth.emit.mscclpp_schema import MAX_CHANNELS_PER_OP

Op = dict[str, Any]


_PACKET_SRCS = {"upkt": 0, "rppkt": 0, "repkt": 1, "respkt": 1, "recpkt": 1, "recspkt": 1}


def _span(buff: dict[str, Any], packets: bool = False) -> tuple[str, int, int] | None:
    """The bytes (in chunks) a local operand occupies: the executor doubles a packet operand's offset and size
    (packets of chunks [i, i + n) take the bytes of chunks [2i, 2i + 2n))."""
    if "type" not in buff:
        return None
    scale = 2 if packets else 1
    return str(buff["type"]), scale * int(buff["index"]), scale * (int(buff["index"]) + int(buff["size"]))


def _operand_spans(op: Op) -> list[tuple[str, int, int] | None]:
    name = op["name"]
    first_packet = _PACKET_SRCS.get(name, 0 if name == "ppkt" and op.get("channel_type") == "port" else None)
    srcs = [_span(b, first_packet is not None and k >= first_packet) for k, b in enumerate(op.get("src_buff", []))]
    dsts = [_span(b, name == "cpkt" or (name in ("recpkt", "recspkt") and k == 1))
            for k, b in enumerate(op.get("dst_buff", []))]
    return srcs + dsts


def _overlaps(a: tuple[str, int, int], b: tuple[str, int, int] | None) -> bool:
    return b is not None and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def read_packets_in_place(tbs: list[list[Op]]) -> list[list[Op]]:
    tbs = [[dict(op) for op in ops] for ops in tbs]
    for ops in tbs:
        for unpack in [op for op in ops if op["name"] == "upkt"]:
            slot = _span(unpack["dst_buff"][0])
            if slot is None or slot[0] != "s":
                continue
            users = [(t, op) for t, other in enumerate(tbs) for op in other if op is not unpack
                     and any(_overlaps(slot, span) for span in _operand_spans(op))]
            if not users or any(op["name"] != "re" or len(op["src_buff"]) != 2 or _span(op["src_buff"][1]) != slot
                                or _overlaps(slot, _span(op["src_buff"][0])) for _, op in users):
                continue
            for _, op in users:
                op["name"] = "repkt"
                op["src_buff"] = [op["src_buff"][0], dict(unpack["src_buff"][0])]
            ops.remove(unpack)
    return tbs


def fuse_reductions(ops: list[Op]) -> list[Op]:
    fused: list[Op] = []
    for op in ops:
        last = fused[-1] if fused else None
        if (last is not None and op["name"] in ("re", "repkt") and last["name"] == op["name"]
                and last["dst_buff"] == op["dst_buff"] == [op["src_buff"][0]] == [last["src_buff"][0]]
                and len(last["src_buff"]) + len(op["src_buff"]) - 1 <= MAX_CHANNELS_PER_OP
                and not any(_overlaps(_span(op["dst_buff"][0]) or ("", 0, 0), span)
                            for span in _operand_spans(op)[1:len(op["src_buff"])])):
            fused[-1] = dict(last, src_buff=last["src_buff"] + op["src_buff"][1:])
        else:
            fused.append(op)
    return fused
