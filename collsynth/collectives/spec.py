"""Collective specifications (DESIGN.md, "Collective").

A collective on `num_ranks` ranks with chunk factor `chunks` has `num_chunks` global chunks. For each
global chunk `c`:
- `pre[c]`: the ranks that hold `c` in their input buffer at the start. For a combining collective
  these are the ranks that *contribute* to `c` (each holds its own addend);
- `post[c]`: the ranks that must hold `c` in their output buffer at the end (for a combining
  collective: the sum of every contribution to `c`).
The buffer layout maps a chunk on a rank to its index in that rank's input / output buffer
(`input_index(c, r)`, `output_index(c, r)`). Buffer sizes are per rank, in chunks.

Layouts follow MSCCLang's (n ranks, chunk factor C):
  AllGather     in C,   out n*C   chunk r*C+i: input[i] of r -> output[r*C+i] of all
  AllToAll      in n*C, out n*C   chunk (s*n+d)*C+i: input[d*C+i] of s -> output[s*C+i] of d
  Broadcast     in C,   out C     chunk i: input[i] of root -> output[i] of all
  Gather        in C,   out n*C   chunk r*C+i: input[i] of r -> output[r*C+i] of root
  Scatter       in n*C, out C     chunk r*C+i: input[r*C+i] of root -> output[i] of r
  Reduce        in C,   out C     chunk i: sum of input[i] over ranks -> output[i] of root
  ReduceScatter in n*C, out C     chunk r*C+i: sum of input[r*C+i] over ranks -> output[i] of r
  AllReduce     in n*C, out n*C   chunk c: sum of input[c] over ranks -> output[c] of all
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from collsynth.core.errors import CollsynthError
from collsynth.core.files import read_json_file

if TYPE_CHECKING:
    from collsynth.collectives.schema import CollectiveSchema


class CollectiveError(CollsynthError):
    """A malformed or impossible collective specification (the message says what to fix)."""


Placement = tuple[tuple[int, int, int], ...]  # (chunk, rank, buffer index)


@dataclass(frozen=True)
class Collective:
    name: str
    num_ranks: int
    chunks: int
    num_chunks: int
    input_chunks: int
    output_chunks: int
    inputs: Placement  # where each chunk starts: (chunk, rank, input index)
    outputs: Placement  # where each chunk must end: (chunk, rank, output index)
    combining: bool = False
    root: int | None = None
    inplace: bool = False

    # --- the sets used by encodings and verify ----------------------------------------------
    @cached_property
    def pre(self) -> tuple[frozenset[int], ...]:
        ranks: list[set[int]] = [set() for _ in range(self.num_chunks)]
        for c, r, _ in self.inputs:
            ranks[c].add(r)
        return tuple(frozenset(x) for x in ranks)

    @cached_property
    def post(self) -> tuple[frozenset[int], ...]:
        ranks: list[set[int]] = [set() for _ in range(self.num_chunks)]
        for c, r, _ in self.outputs:
            ranks[c].add(r)
        return tuple(frozenset(x) for x in ranks)

    def precondition(self, chunk: int, rank: int) -> bool:
        return rank in self.pre[chunk]

    def postcondition(self, chunk: int, rank: int) -> bool:
        return rank in self.post[chunk]

    # --- buffer layout -------------------------------------------------------------------------
    @cached_property
    def _input_map(self) -> Mapping[tuple[int, int], int]:
        return MappingProxyType({(c, r): i for c, r, i in self.inputs})

    @cached_property
    def _output_map(self) -> Mapping[tuple[int, int], int]:
        return MappingProxyType({(c, r): i for c, r, i in self.outputs})

    @cached_property
    def _input_chunk_at(self) -> Mapping[tuple[int, int], int]:
        return MappingProxyType({(r, i): c for c, r, i in self.inputs})

    @cached_property
    def _output_chunk_at(self) -> Mapping[tuple[int, int], int]:
        return MappingProxyType({(r, i): c for c, r, i in self.outputs})

    def input_index(self, chunk: int, rank: int) -> int:
        return self._input_map[(chunk, rank)]

    def output_index(self, chunk: int, rank: int) -> int:
        return self._output_map[(chunk, rank)]

    def input_chunk(self, rank: int, index: int) -> int | None:
        """The global chunk that starts at input[index] of rank (None if that slot is unused)."""
        return self._input_chunk_at.get((rank, index))

    def output_chunk(self, rank: int, index: int) -> int | None:
        """The global chunk that must end at output[index] of rank (None if unchecked)."""
        return self._output_chunk_at.get((rank, index))

    # --- derived collectives -------------------------------------------------------------------
    def with_chunks(self, chunks: int) -> Collective:
        """The same collective with another chunk factor (standard collectives only)."""
        if self.name not in STANDARD:
            raise CollectiveError(f"cannot re-chunk user-defined collective {self.name!r}")
        return make_collective(self.name, self.num_ranks, chunks, root=self.root, inplace=self.inplace)

    def split(self, factor: int) -> Collective:
        """Every chunk split into `factor` pieces, piece k of the chunk at index j at index j * factor + k
        (chunk c becomes chunks c * factor .. c * factor + factor - 1): a standard collective's chunk factor
        C becomes factor * C. The one chunk-splitting transform (synthesis and the compiler's instances)."""
        if factor < 1:
            raise CollectiveError(f"split factor must be >= 1, got {factor}")
        if factor == 1:
            return self
        if self.name in STANDARD and self == make_collective(self.name, self.num_ranks, self.chunks, root=self.root,
                                                             inplace=self.inplace):
            return self.with_chunks(self.chunks * factor)
        ins = [(c * factor + k, r, i * factor + k) for c, r, i in self.inputs for k in range(factor)]
        outs = [(c * factor + k, r, i * factor + k) for c, r, i in self.outputs for k in range(factor)]
        return custom_collective(self.name, self.num_ranks, ins, outs, combining=self.combining,
                                 chunks=self.chunks * factor, input_chunks=self.input_chunks * factor,
                                 output_chunks=self.output_chunks * factor, inplace=self.inplace)

    def non_combining_dual(self) -> Collective:
        """Reduce <-> Broadcast and ReduceScatter <-> AllGather: a schedule of the dual run backwards
        (every send reversed, copies turned into reductions) is a schedule of the combining one."""
        duals = {"reduce": "broadcast", "reducescatter": "allgather"}
        if self.name not in duals:
            raise CollectiveError(f"{self.name} has no non-combining dual (AllReduce = ReduceScatter + AllGather)")
        return make_collective(duals[self.name], self.num_ranks, self.chunks, root=self.root)

    def with_inplace(self, inplace: bool) -> Collective:
        return replace(self, inplace=inplace)

    # --- reference semantics -------------------------------------------------------------------
    def reference_outputs(self, inputs: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Expected outputs for the given per-rank inputs of shape (input_chunks, elems).

        Returns per rank `(expected, checked)`: expected output of shape (output_chunks, elems) and a
        boolean mask of the output chunks the postcondition constrains. Reductions are summed in rank
        order; callers compare floating-point sums with a tolerance."""
        elems = inputs[0].shape[1] if inputs else 0
        result = []
        dtype = inputs[0].dtype if inputs else np.float32
        values: list[np.ndarray] = []
        for c in range(self.num_chunks):
            ranks = sorted(self.pre[c])
            if self.combining:
                acc = inputs[ranks[0]][self.input_index(c, ranks[0])].copy()
                for r in ranks[1:]:
                    acc = acc + inputs[r][self.input_index(c, r)]
                values.append(acc)
            else:
                values.append(inputs[ranks[0]][self.input_index(c, ranks[0])])
        for _ in range(self.num_ranks):
            expected = np.zeros((self.output_chunks, elems), dtype=dtype)
            checked = np.zeros(self.output_chunks, dtype=bool)
            result.append((expected, checked))
        for c, r, i in self.outputs:
            result[r][0][i] = values[c]
            result[r][1][i] = True
        return result

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "num_ranks": self.num_ranks, "chunks": self.chunks, "root": self.root,
            "inplace": self.inplace, "combining": self.combining, "num_chunks": self.num_chunks,
            "input_chunks": self.input_chunks, "output_chunks": self.output_chunks,
            "inputs": [list(x) for x in self.inputs], "outputs": [list(x) for x in self.outputs],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], label: str = "collective") -> Collective:
        """A collective from JSON: standard ones by name, user-defined ones from their placements; validated
        against the declared schema (collectives/schema.py) first."""
        from collsynth.collectives.schema import check_collective_dict

        doc = check_collective_dict(data, label, CollectiveError)
        name = canonical_name(doc.name)
        if name in STANDARD and doc.inputs is None:
            return make_collective(name, doc.num_ranks, doc.chunks, root=doc.root, inplace=doc.inplace)
        if doc.inputs is None or doc.outputs is None:
            raise CollectiveError(f"{label}: {doc.name!r} is not a standard collective; give its 'inputs' and "
                                  "'outputs' placements ([chunk, rank, index] lists)")
        if name in STANDARD:
            # A full to_dict() of a standard collective: rebuild it as standard (keeps its root) when the
            # placements are the standard ones.
            standard = _standard_if_same(name, doc)
            if standard is not None:
                return standard
        return custom_collective(
            name=doc.name, num_ranks=doc.num_ranks, inputs=[tuple(x) for x in doc.inputs],
            outputs=[tuple(x) for x in doc.outputs], combining=doc.combining, chunks=doc.chunks,
            input_chunks=doc.input_chunks, output_chunks=doc.output_chunks, inplace=doc.inplace,
        )

    def __str__(self) -> str:
        root = f", root={self.root}" if self.root is not None else ""
        return f"{self.name}(ranks={self.num_ranks}, chunks={self.chunks}{root})"


# --- the standard collectives ------------------------------------------------------------------

def _allgather(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    ins = tuple((r * k + i, r, i) for r in range(n) for i in range(k))
    outs = tuple((c, r, c) for c in range(n * k) for r in range(n))
    return ins, outs, n * k, k, n * k


def _alltoall(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    ins = tuple(((s * n + d) * k + i, s, d * k + i) for s in range(n) for d in range(n) for i in range(k))
    outs = tuple(((s * n + d) * k + i, d, s * k + i) for s in range(n) for d in range(n) for i in range(k))
    return ins, outs, n * n * k, n * k, n * k


def _broadcast(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    assert root is not None
    return tuple((i, root, i) for i in range(k)), tuple((i, r, i) for i in range(k) for r in range(n)), k, k, k


def _gather(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    assert root is not None
    ins = tuple((r * k + i, r, i) for r in range(n) for i in range(k))
    return ins, tuple((c, root, c) for c in range(n * k)), n * k, k, n * k


def _scatter(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    assert root is not None
    ins = tuple((c, root, c) for c in range(n * k))
    return ins, tuple((r * k + i, r, i) for r in range(n) for i in range(k)), n * k, n * k, k


def _reduce(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    assert root is not None
    return tuple((i, r, i) for i in range(k) for r in range(n)), tuple((i, root, i) for i in range(k)), k, k, k


def _reducescatter(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    ins = tuple((c, r, c) for c in range(n * k) for r in range(n))
    return ins, tuple((r * k + i, r, i) for r in range(n) for i in range(k)), n * k, n * k, k


def _allreduce(n: int, k: int, root: int | None) -> tuple[Placement, Placement, int, int, int]:
    ins = tuple((c, r, c) for c in range(n * k) for r in range(n))
    return ins, ins, n * k, n * k, n * k


# canonical name -> (layout builder, combining, rooted, display name)
STANDARD: Mapping[str, tuple[Callable[..., tuple[Placement, Placement, int, int, int]], bool, bool, str]] = \
    MappingProxyType({
        "allgather": (_allgather, False, False, "AllGather"),
        "alltoall": (_alltoall, False, False, "AllToAll"),
        "broadcast": (_broadcast, False, True, "Broadcast"),
        "gather": (_gather, False, True, "Gather"),
        "scatter": (_scatter, False, True, "Scatter"),
        "reduce": (_reduce, True, True, "Reduce"),
        "reducescatter": (_reducescatter, True, False, "ReduceScatter"),
        "allreduce": (_allreduce, True, False, "AllReduce"),
    })


def canonical_name(name: str) -> str:
    """`AllGather`, `all_gather`, `all-gather` -> `allgather`."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


def display_name(name: str) -> str:
    entry = STANDARD.get(canonical_name(name))
    return entry[3] if entry else name


def make_collective(name: str, num_ranks: int, chunks: int = 1, *, root: int | None = None,
                    inplace: bool = False) -> Collective:
    """A standard collective by (forgiving) name."""
    key = canonical_name(name)
    if key not in STANDARD:
        known = ", ".join(v[3] for v in STANDARD.values())
        raise CollectiveError(f"unknown collective {name!r}; known: {known} (or a JSON file for a custom one)")
    if num_ranks < 1:
        raise CollectiveError(f"{name}: needs at least 1 rank, got {num_ranks}")
    if chunks < 1:
        raise CollectiveError(f"{name}: chunks must be >= 1, got {chunks}")
    build, combining, rooted, _ = STANDARD[key]
    if rooted:
        root = 0 if root is None else int(root)
        if not 0 <= root < num_ranks:
            raise CollectiveError(f"{name}: root {root} is outside 0..{num_ranks - 1}")
    else:
        root = None
    ins, outs, total, in_size, out_size = build(num_ranks, chunks, root)
    return Collective(key, num_ranks, chunks, total, in_size, out_size, ins, outs, combining, root, inplace)


def custom_collective(name: str, num_ranks: int, inputs: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], *,
                      combining: bool = False, chunks: int = 1, input_chunks: int | None = None,
                      output_chunks: int | None = None, inplace: bool = False) -> Collective:
    """A user-defined collective from its placements `(chunk, rank, index)`."""
    ins = tuple(sorted((int(c), int(r), int(i)) for c, r, i in inputs))
    outs = tuple(sorted((int(c), int(r), int(i)) for c, r, i in outputs))
    if not ins or not outs:
        raise CollectiveError(f"collective {name!r}: 'inputs' and 'outputs' must be non-empty lists of "
                              "[chunk, rank, index]")
    num_chunks = 1 + max(c for c, _, _ in ins + outs)
    for c, r, i in ins + outs:
        if not 0 <= r < num_ranks:
            raise CollectiveError(f"collective {name!r}: rank {r} is outside 0..{num_ranks - 1}")
        if c < 0 or i < 0:
            raise CollectiveError(f"collective {name!r}: chunk and index must be >= 0, got [{c}, {r}, {i}]")
    have = {c for c, _, _ in ins}
    missing = sorted({c for c, _, _ in outs} - have)
    if missing:
        raise CollectiveError(f"collective {name!r}: chunks {missing[:5]} are required in 'outputs' but no rank "
                              "holds them in 'inputs'")
    for label, placement in (("inputs", ins), ("outputs", outs)):
        slots = [(r, i) for _, r, i in placement]
        if len(slots) != len(set(slots)):
            raise CollectiveError(f"collective {name!r}: two chunks share one buffer slot in '{label}'")
    in_size = input_chunks if input_chunks is not None else 1 + max(i for _, _, i in ins)
    out_size = output_chunks if output_chunks is not None else 1 + max(i for _, _, i in outs)
    return Collective(name, num_ranks, chunks, num_chunks, int(in_size), int(out_size), ins, outs, combining, None,
                      inplace)


def _standard_if_same(name: str, doc: CollectiveSchema) -> Collective | None:
    """The standard collective `name` described by `doc`, if `doc`'s placements are exactly its layout."""
    try:
        standard = make_collective(name, doc.num_ranks, doc.chunks, root=doc.root, inplace=doc.inplace)
    except CollectiveError:
        return None
    ins = sorted(tuple(x) for x in doc.inputs or ())
    outs = sorted(tuple(x) for x in doc.outputs or ())
    if ins == sorted(standard.inputs) and outs == sorted(standard.outputs) and doc.combining == standard.combining:
        return standard
    return None


def load_collective(path: str | Path) -> Collective:
    data = read_json_file(path, CollectiveError, "the collective")
    if not isinstance(data, dict):
        raise CollectiveError(f"{path}: a collective JSON file holds one object; see docs/formats.md")
    try:
        return Collective.from_dict(data, label=str(path))
    except CollectiveError as exc:  # the schema's messages start with the path; the builders' checks do not
        raise CollectiveError(exc.args[0] if str(exc).startswith(str(path)) else f"{path}: {exc}") from None


def resolve_collective(spec: str, num_ranks: int, chunks: int = 1, *, root: int | None = None) -> Collective:
    """A standard collective by forgiving name, or a path to a user-defined collective's JSON file."""
    if spec.endswith(".json") or (Path(spec).exists() and not Path(spec).is_dir()):
        coll = load_collective(spec)
        if coll.num_ranks != num_ranks:
            raise CollectiveError(f"{spec}: defined for {coll.num_ranks} ranks but the topology has {num_ranks}")
        return coll
    return make_collective(spec, num_ranks, chunks, root=root)


def alltonext(num_ranks: int, chunks: int = 1) -> Collective:
    """Each rank sends its input to the next rank (the last rank sends nothing): a user-defined example."""
    ins = [(r * chunks + i, r, i) for r in range(num_ranks - 1) for i in range(chunks)]
    outs = [(r * chunks + i, r + 1, i) for r in range(num_ranks - 1) for i in range(chunks)]
    return custom_collective("alltonext", num_ranks, ins, outs, chunks=chunks, input_chunks=chunks,
                             output_chunks=chunks)
