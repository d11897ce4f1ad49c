"""Choosing the winner per size: fastest candidate per grid size, adjacent sizes with the same winner merged
into ranges, and the boundary between two ranges placed at the simulated crossover.

Sizes here are nccl-tests' size column, which is also what the MSCCL scheduler compares `minBytes` /
`maxBytes` with (count x element size x sizeMultiplier, the larger of a rank's two buffers). Pure functions:
the crossover search takes the two candidates' timing functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from collsynth.collectives import canonical_name


@dataclass(frozen=True)
class Winner:
    """The fastest candidate at one grid size, and the runner-up for the margin."""

    size_bytes: int
    winner: str
    time_us: float
    runner_up: str | None = None
    runner_up_us: float | None = None

    @property
    def margin(self) -> float | None:
        """How much slower the runner-up is (0.25 = 25 %)."""
        if self.runner_up_us is None or self.time_us <= 0:
            return None
        return self.runner_up_us / self.time_us - 1.0


@dataclass(frozen=True)
class SizeRange:
    """`winner` is used for sizes in [min_bytes, max_bytes] (max_bytes 0: no upper limit, as MSCCL reads it);
    `first_size`..`last_size` are the grid sizes it won."""

    winner: str
    first_size: int
    last_size: int
    min_bytes: int
    max_bytes: int

    def contains(self, size: int) -> bool:
        return size >= self.min_bytes and (self.max_bytes == 0 or size <= self.max_bytes)


def winners_per_size(times: Mapping[str, Mapping[int, float]]) -> list[Winner]:
    """For every size that some candidate has a time for: the fastest candidate (ties: the name that sorts
    first, so the choice is deterministic) and the runner-up."""
    sizes = sorted({size for per_size in times.values() for size in per_size})
    out = []
    for size in sizes:
        ranked = sorted((per_size[size], name) for name, per_size in times.items() if size in per_size)
        best_time, best = ranked[0]
        second = ranked[1] if len(ranked) > 1 else (None, None)
        out.append(Winner(size, best, best_time, second[1], second[0]))
    return out


def merge_ranges(winners: Sequence[Winner]) -> list[tuple[str, int, int]]:
    """Adjacent grid sizes with the same winner as (winner, first size, last size)."""
    ranges: list[tuple[str, int, int]] = []
    for w in winners:
        if ranges and ranges[-1][0] == w.winner:
            ranges[-1] = (w.winner, ranges[-1][1], w.size_bytes)
        else:
            ranges.append((w.winner, w.size_bytes, w.size_bytes))
    return ranges


def crossover(time_left: Callable[[int], float], time_right: Callable[[int], float], lo: int, hi: int,
              granule: int) -> int:
    """The smallest size x in (lo, hi], a multiple of `granule`, at which the right candidate is strictly
    faster, given that the left one is at least as fast at `lo` and the right one faster at `hi`
    (bisection; if the two curves cross more than once it finds one crossing)."""
    granule = max(1, granule)
    low, high = lo // granule, -(-hi // granule)  # the left one wins at low*granule, the right at high*granule
    if high <= low + 1:
        return max(lo + 1, high * granule)
    while high - low > 1:
        mid = (low + high) // 2
        if time_right(mid * granule) < time_left(mid * granule):
            high = mid
        else:
            low = mid
    return high * granule


def size_granule(collective: str, ngpus: int, elem_bytes: int) -> int:
    """The step between sizes nccl-tests (and so MSCCL callers) can have for this collective: (all)gather and
    (reduce)scatter counts are multiples of 4 elements per rank, AllToAll's of 16 bytes per peer."""
    kind = canonical_name(collective)
    if kind in ("allgather", "gather", "reducescatter", "scatter"):
        return 4 * ngpus * elem_bytes
    if kind == "alltoall":
        return max(16, elem_bytes) * ngpus
    return elem_bytes


def size_ranges(winners: Sequence[Winner], boundary: Callable[[str, str, int, int], int]) -> list[SizeRange]:
    """Ranges that tile all sizes: the first starts at 0, the last has no upper limit (max_bytes 0), and
    each boundary is `boundary(left, right, last size of left, first size of right)`."""
    merged = merge_ranges(winners)
    out: list[SizeRange] = []
    for index, (name, first, last) in enumerate(merged):
        min_bytes = 0 if index == 0 else out[-1].max_bytes + 1
        if index + 1 < len(merged):
            next_name, next_first, _ = merged[index + 1]
            start_next = boundary(name, next_name, last, next_first)
            max_bytes = max(min_bytes, start_next - 1)
        else:
            max_bytes = 0
        out.append(SizeRange(name, first, last, min_bytes, max_bytes))
    return out


@dataclass(frozen=True)
class TunedRange:
    """One tuned configuration (collsynth.tune) of an entry over the grid sizes first_size..last_size."""

    first_size: int
    last_size: int
    config: Mapping[str, object]

    def label(self) -> str:
        c = self.config
        return (f"{c.get('protocol')} x{c.get('instances')} {c.get('merge')}"
                f"{'' if c.get('fusion', True) else ' nofuse'}{'' if c.get('pair_threadblocks', True) else ' tb/conn'}"
                f"{' timed' if c.get('timed_order') else ''}{' timed-merge' if c.get('timed_merge') else ''}")


def tuned_ranges(provenance: Mapping[str, object]) -> list[TunedRange]:
    """An entry's tuned configurations per size range, from the catalog's tuning records (none: not tuned)."""
    from collsynth.tune.entry import config_ranges

    records = provenance.get("tuned")
    if not isinstance(records, list):
        return []
    return [TunedRange(lo, hi, config) for lo, hi, config in config_ranges(records)]


def tuned_at(provenance: Mapping[str, object], size: int) -> dict | None:  # type: ignore[type-arg]
    """The tuning record of the grid size nearest to `size` (ties: the smaller), or None."""
    records = provenance.get("tuned")
    if not isinstance(records, list) or not records:
        return None
    return min(records, key=lambda r: (abs(int(r["size_bytes"]) - size), int(r["size_bytes"])))


TUNED_SEP = "~"  # a candidate key `ENTRY~XMLHASH`: the entry's algorithm in one of its tuned configurations


def tuned_record(provenance: Mapping[str, object], size_bytes: int) -> dict | None:  # type: ignore[type-arg]
    """The tuning record of exactly this grid size whose XML the catalog stores, or None."""
    records = provenance.get("tuned")
    if not isinstance(records, list):
        return None
    return next((r for r in records if int(r["size_bytes"]) == size_bytes and r.get("xml_sha256")), None)


def with_tuned(times: Mapping[str, Mapping[int, float]],
               provenances: Mapping[str, Mapping[str, object]]) -> dict[str, dict[int, float]]:
    """Candidate times where each entry, at each size, is the faster of its own compiled variant and its tuned
    configuration there (key `ENTRY~XMLHASH`, one per distinct tuned XML): so an entry competes once per
    size, as what it would really run. Entries without a provenance here keep their own times."""
    out: dict[str, dict[int, float]] = {}
    for name, per_size in times.items():
        for size, own in per_size.items():
            record = tuned_record(provenances.get(name, {}), size)
            key = name
            if record is not None and float(record["time_us"]) < own:
                key, own = f"{name}{TUNED_SEP}{record['xml_sha256']}", float(record["time_us"])
            out.setdefault(key, {})[size] = own
    return out


def entry_of(key: str) -> str:
    """The entry id of a candidate key (`ENTRY` or `ENTRY~XMLHASH`)."""
    return key.split(TUNED_SEP, 1)[0]
