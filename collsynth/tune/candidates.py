"""The candidates of one (topology, collective) and the sizes to tune: checked input, one-line errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from collsynth.algorithms.registry import library_programs
from collsynth.collectives.spec import canonical_name
from collsynth.core.errors import CollsynthError
from collsynth.core.units import parse_size
from collsynth.schedule.algorithm import Algorithm
from collsynth.schedule.verify import verify
from collsynth.sim.nccl import size_sweep
from collsynth.topologies import Topology
from collsynth.tune.space import LIBRARY, MILP, SYNTHESIZED, Candidate, TuneError

MAX_SIZE = 1 << 40  # 1 TB per rank is beyond any GPU: a size above it is a typo
MAX_SIZES = 64


def parse_size_range(text: str) -> list[int]:
    """`LO:HI` (x4 steps, the catalog's sweep), `LO:HI:FACTOR`, or `A,B,C`; refuses empty or absurd ranges."""
    text = text.strip()
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) not in (2, 3):
                raise TuneError(f"cannot read sizes {text!r}; write LO:HI or LO:HI:FACTOR, e.g. 1KB:1GB")
            factor = int(parts[2]) if len(parts) == 3 else 4
            lo, hi = parse_size(parts[0]), parse_size(parts[1])
            if lo < 1 or hi < lo:
                raise TuneError(f"size range {text!r} is empty; give LO:HI with 1B <= LO <= HI, e.g. 1KB:1GB")
            sizes = size_sweep(lo, hi, factor)
        else:
            sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        if isinstance(exc, TuneError):
            raise
        raise TuneError(f"cannot read sizes {text!r} ({exc}); write e.g. 1KB:1GB or 1MB,64MB") from None
    if not sizes or min(sizes) < 1:
        raise TuneError(f"no sizes in {text!r}; write e.g. --sizes 1KB:1GB")
    if max(sizes) > MAX_SIZE or len(sizes) > MAX_SIZES:
        raise TuneError(f"size range {text!r} is absurd (sizes up to 1TB, at most {MAX_SIZES} of them); "
                        "write e.g. 1KB:1GB")
    return sizes


def library_candidates(topology: Topology, collective: str) -> list[Candidate]:
    return [Candidate(f"lib:{name}", LIBRARY, program=program)
            for name, program in library_programs(topology, canonical_name(collective))]


def algorithm_candidate(algorithm: Algorithm, topology: Topology, collective: str, where: str = "") -> Candidate:
    """A schedule as a candidate, after checking it fits `topology` and is the collective asked for."""
    label = where or algorithm.name
    if canonical_name(algorithm.collective.name) != canonical_name(collective):
        raise TuneError(f"{label}: is a {algorithm.collective.name} algorithm, not {collective}; "
                        "give an algorithm of the collective being tuned")
    if algorithm.topology.num_ranks != topology.num_ranks:
        raise TuneError(f"{label}: is for {algorithm.topology.num_ranks} ranks, topology {topology.name!r} has "
                        f"{topology.num_ranks}; give an algorithm synthesized for this topology")
    missing = sorted({(s.src, s.dst) for _, s in algorithm.sends()} - {(l.src, l.dst) for l in topology.link_list})
    if missing:
        raise TuneError(f"{label}: sends {missing[0][0]}->{missing[0][1]}, a link topology {topology.name!r} lacks; "
                        "give an algorithm synthesized for this topology")
    try:
        verify(algorithm)
    except CollsynthError as exc:
        raise TuneError(f"{label}: fails verification ({exc}); give a correct algorithm") from None
    timed = any(s.start_us is not None for _, s in algorithm.sends())
    name = re.sub(r"\s+", "_", algorithm.name)
    return Candidate(f"{'milp' if timed else 'syn'}:{name}", MILP if timed else SYNTHESIZED, algorithm=algorithm)


def file_candidates(paths: Sequence[str | Path], topology: Topology, collective: str) -> list[Candidate]:
    out = []
    for path in paths:
        if not Path(path).is_file():
            raise TuneError(f"algorithm file {str(path)!r} does not exist; give the path of an algorithm JSON file")
        try:
            algorithm = Algorithm.load(path)
        except CollsynthError as exc:
            raise TuneError(f"{path}: not an algorithm file ({exc}); give a file written by collsynth synth") from None
        out.append(algorithm_candidate(algorithm, topology, collective, str(path)))
    return _unique(out)


def frontier_candidates(topology: Topology, collective: str, *, max_chunks: int = 6,
                        time_limit: float = 60.0) -> list[Candidate]:
    """Every point of the SMT Pareto frontier (synthesized now)."""
    from collsynth.collectives import make_collective
    from collsynth.synth.pareto import pareto_frontier

    result = pareto_frontier(topology, make_collective(canonical_name(collective), topology.num_ranks, 1),
                             max_chunks=max_chunks, time_limit=time_limit)
    return _unique([algorithm_candidate(p.algorithm, topology, collective) for p in result.frontier
                    if p.algorithm is not None])


def _unique(candidates: list[Candidate]) -> list[Candidate]:
    seen: dict[str, int] = {}
    out = []
    for c in candidates:
        k = seen.get(c.name, 0)
        seen[c.name] = k + 1
        out.append(c if k == 0 else Candidate(f"{c.name}#{k + 1}", c.source, c.algorithm, c.program))
    return out
