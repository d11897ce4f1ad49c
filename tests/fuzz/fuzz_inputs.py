"""Seeds, mutation strategies and the one oracle of the fuzz suite.

Every file kind collsynth reads (topology, TACCL profile, collective, algorithm, sketch, plan TOML, MSCCL-IR
XML) starts from a valid document; hypothesis mutates it (values replaced by hostile ones, keys dropped or
misspelt, bytes truncated or made non-UTF-8, nesting made deep) and the CLI runs on it in-process. The oracle:
exit 2 with exactly one `error:` line on stderr, or a success whose output verifies independently.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from collsynth.algorithms import LIBRARY, suggested_parameters
from collsynth.collectives import custom_collective, make_collective
from collsynth.compiler import compile_program
from collsynth.emit.msccl_xml import ir_to_xml
from collsynth.schedule import Algorithm
from collsynth.schedule.algorithm import Send, Step
from collsynth.topologies.library import ring

_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = next((p for p in (_ROOT.parent / "shared" / "examples" / "taccl", _ROOT / ".." / "shared" / "examples" /
                             "taccl", Path("/work/shared/examples/taccl")) if p.is_dir()), _ROOT / "missing")

HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1, 2, 3, 4.5, 0.5, -0.0, 10**9, 10**30, float("nan"), float("inf"), float("-inf"),
    "", "4", "x", "copy", "reduce", "no", [], {}, [0], [0, 0, 0], [[0, 1]], {"a": 1}, "\u00e9\u4e2d", 1e300,
]


def ring_allgather_algorithm() -> Algorithm:
    topology = ring(4)
    steps = [Step(1, tuple(Send((r - t) % 4, r, (r + 1) % 4) for r in range(4))) for t in range(3)]
    return Algorithm("ring-ag", topology, make_collective("allgather", 4), tuple(steps))


def ring_allgather_xml() -> str:
    topology = ring(4)
    entry = LIBRARY["ring_allgather"]
    return ir_to_xml(compile_program(entry.builder(topology, **suggested_parameters(entry, topology))))


def json_seeds() -> dict[str, Any]:
    """Valid documents of each JSON kind."""
    standard = make_collective("allgather", 4, 2)  # the seed XML's chunking
    custom = custom_collective("my_allgather", 4, standard.inputs, standard.outputs)
    seeds: dict[str, Any] = {
        "topology": ring(4).to_dict(),
        "collective": make_collective("allgather", 4).to_dict(),
        "custom_collective": custom.to_dict(),
        "algorithm": ring_allgather_algorithm().to_dict(),
    }
    for kind, name in (("taccl_profile", "topo/topo-ndv2-1MB.json"), ("sketch", "sketch/sk1-ndv2-n1.json")):
        path = EXAMPLES / name
        if path.is_file():
            seeds[kind] = json.loads(path.read_text())
    return seeds


PLAN_SEED = """name = "fuzz"
sizes = "1KB:4KB"

[compile]
protocols = ["Simple"]
instances = [1]

[limits]
time_limit_s = 5
max_chunks = 2

[[synthesizers]]
name = "inst"
kind = "instance"
chunks = 1
steps = 3

[[targets]]
topology = "ring:4"
collectives = ["allgather"]
synthesizers = ["inst"]
"""


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:6]):  # a few entries of long lists are enough
            out += _paths(item, (*prefix, index))
    return out


def _holder(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


@st.composite
def mutated_json(draw: st.DrawFn, seed: Any) -> bytes:
    """The seed document after 1-3 structural mutations, serialized (NaN/Infinity as JSON's non-standard
    tokens), then possibly damaged at the byte level."""
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        operation = draw(st.sampled_from(["replace", "replace", "nudge", "nudge", "delete", "misspell", "add"]))
        if not path:
            doc = draw(st.sampled_from(HOSTILE)) if operation == "replace" else doc
            continue
        holder = _holder(doc, path)
        key = path[-1]
        if operation == "nudge":  # a plausible edit: often still valid, so successes get verified too
            value = holder[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            holder[key] = value + draw(st.sampled_from([-1, 1])) if isinstance(value, int) else value * 2
        elif operation == "replace":
            holder[key] = draw(st.sampled_from(HOSTILE))
        elif operation == "delete":
            del holder[key]
        elif isinstance(holder, dict) and operation == "misspell" and isinstance(key, str) and key:
            holder[key[:-1] + key[-1].upper() + "_"] = holder.pop(key)
        elif isinstance(holder, dict):
            holder[draw(st.sampled_from(["colour", "extra", "num_rank", "link"]))] = draw(st.sampled_from(HOSTILE))
        else:
            holder.insert(key, draw(st.sampled_from(HOSTILE)))
    return damage(draw, json.dumps(doc, allow_nan=True).encode())


def damage(draw: st.DrawFn, data: bytes) -> bytes:
    """Sometimes break the bytes: truncate, a non-UTF-8 byte, a NUL, deep nesting, or nothing at all."""
    kind = draw(st.sampled_from([None, None, None, None, "truncate", "latin1", "nul", "nest"]))
    if kind is None or not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    if kind == "truncate":
        return data[:at]
    if kind == "latin1":
        return data[:at] + b"\xe9\xff" + data[at:]
    if kind == "nul":
        return data[:at] + b"\x00" + data[at:]
    return b"[" * 100_000 + data


@st.composite
def mutated_plan(draw: st.DrawFn) -> bytes:
    """The seed plan with one line replaced, removed, duplicated or a value made hostile."""
    lines = PLAN_SEED.splitlines()
    index = draw(st.integers(0, len(lines) - 1))
    operation = draw(st.sampled_from(["value", "value", "delete", "duplicate", "misspell"]))
    line = lines[index]
    if operation == "value" and "=" in line:
        key = line.split("=")[0].strip()
        value = draw(st.sampled_from(['nan', 'inf', '-1', '0', '4.5', '"x"', '[]', '{}', 'true', '1000000000',
                                      '["LL", 3]', '"1KB:1TB"', '[[1]]', '"\u00e9"']))
        lines[index] = f"{key} = {value}"
    elif operation == "delete":
        del lines[index]
    elif operation == "duplicate":
        lines.insert(index, line)
    elif "=" in line:
        key = line.split("=")[0].strip()
        lines[index] = line.replace(key, key[:-1] + "_", 1)
    return damage(draw, ("\n".join(lines) + "\n").encode())


_XML_VALUES = ["-1", "0", "1", "2", "7", "72", "1000000000", "x", "", "1.5", " 3", "99999999999999999999", "nan",
               "s", "r", "rcs", "rrc", "nop", "cpy", "re", "i", "o", "s", "Simple", "LL", "allgather", "custom"]


@st.composite
def mutated_xml(draw: st.DrawFn, seed: str) -> bytes:
    """The seed XML with 1-3 attribute values replaced (or an attribute dropped), possibly byte-damaged."""
    import re

    text = seed
    for _ in range(draw(st.integers(1, 3))):
        attributes = list(re.finditer(r'(\w+)="([^"]*)"', text))
        match = draw(st.sampled_from(attributes))
        replacement = "" if draw(st.integers(0, 9)) == 0 else f'{match.group(1)}="{draw(st.sampled_from(_XML_VALUES))}"'
        text = text[:match.start()] + replacement + text[match.end():]
    return damage(draw, text.encode())
