"""`collsynth doctor DIR_OR_XML [--target T] [--nranks N] [--size S]`: what a runtime would do with these files.

Replays the target's loader (collsynth.core.targets: which `coll` spellings load, steps, thread blocks, channels,
the 8-bit dependency field, 16-bit offsets, threadblocks per channel, the nop dependency-chain rule, the algorithm
cap, required attributes, legacy's size-range checks (minBytes > maxBytes refused, so maxBytes="0" with
minBytes > 0 is) and its i_chunks/o_chunks vs nchunksperloop check; sources in collsynth/core/targets.py) and its
selection rule (first file in load order whose coll, ngpus and in-place kind match, whose nchunksperloop divides
the element count, and whose [minBytes, maxBytes] holds the size under that runtime's rule), then says per
collective and size which file the runtime would pick, or why none. Exit 1 when a file would be refused or never
selected; exit 2 for bad input.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from collsynth.core.errors import CollsynthError
from collsynth.core.targets import DEFAULT_TARGET, XML_TARGETS, Target, get_target
from collsynth.core.units import format_size, parse_size

if TYPE_CHECKING:  # lxml and the IR load when the command runs, not for --help
    from lxml import etree

    from collsynth.ir import Algo

# The `coll` values the current loaders (msccl-executor-nccl, RCCL) parse; microsoft/msccl v0.7.4 spells
# reduce-scatter `reduce_scatter` and also takes `custom`.
_CURRENT_COLLS = frozenset({"allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "gather",
                            "scatter", "alltoallv", "send", "recv"})
_LEGACY_COLLS = (_CURRENT_COLLS - {"reducescatter"}) | {"reduce_scatter", "custom"}
_MULTIPLIED = frozenset({"allgather", "reducescatter", "reduce_scatter", "alltoall"})  # sizeMultiplier = ngpus
ELEM_BYTES = 4  # float32 counts for the nchunksperloop divisibility rule
LEGACY_DEFAULT_MAX_BYTES = 1 << 27  # microsoft/msccl topo.cc: maxBytes when the attribute is absent (128 MB)


class DoctorError(CollsynthError):
    """Nothing to examine (no such file or directory, no XML)."""


@dataclass(frozen=True)
class LoadedFile:
    path: Path
    coll: str
    ngpus: int
    nchunksperloop: int
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int
    refused: str | None  # the line the loader prints (or would print), None when it loads


def loader_verdict(path: Path, target: Target) -> LoadedFile:
    """Parse one file as the target's loader does."""
    from lxml import etree

    try:
        root = etree.parse(str(path), etree.XMLParser(remove_comments=True, resolve_entities=False,
                                                      no_network=True, huge_tree=True)).getroot()
    except (etree.XMLSyntaxError, OSError) as exc:
        return LoadedFile(path, "?", 0, 1, False, False, 0, 0, f"XML Parse error: {exc}")
    attrs = root.attrib
    # legacy defaults an absent maxBytes to 1<<27 (microsoft/msccl src/graph/topo.cc); the others require it
    defaults = {"maxBytes": str(LEGACY_DEFAULT_MAX_BYTES) if target.name == "msccl-legacy" else "0"}
    try:
        fields = {name: int(attrs.get(name, defaults.get(name, "0"))) for name in (
            "ngpus", "nchunksperloop", "inplace", "outofplace", "minBytes", "maxBytes")}
    except ValueError as exc:
        return LoadedFile(path, "?", 0, 1, False, False, 0, 0, f"XML Parse error: {exc}")
    coll = attrs.get("coll", "")
    loaded = LoadedFile(path, coll, fields["ngpus"], max(fields["nchunksperloop"], 1), bool(fields["inplace"]),
                        bool(fields["outofplace"]), fields["minBytes"], fields["maxBytes"], None)
    return replace(loaded, refused=_refusal(path, root, coll, fields, target))


def _refusal(path: Path, root: etree._Element, coll: str, fields: dict[str, int], target: Target) -> str | None:
    from collsynth.compiler.split import target_violation
    from collsynth.emit.msccl_xml import read_xml

    accepted = _LEGACY_COLLS if target.name == "msccl-legacy" else _CURRENT_COLLS
    if target.runtime_limits and coll not in accepted:
        hint = {"reducescatter": "reduce_scatter", "reduce_scatter": "reducescatter"}.get(coll)
        fix = f" (it spells it {hint!r})" if hint else ""
        return f"MSCCL: unsupported collective: {coll}{fix}"
    if target.name == "msccl-legacy":
        # microsoft/msccl src/graph/topo.cc mscclGetAlgoFromXMLAndSetAlgo: the size range's checks
        if fields["minBytes"] > fields["maxBytes"]:
            return "MSCCL: minBytes cannot be greater than maxBytes."
        if fields["minBytes"] < 0 or fields["maxBytes"] < 0:
            return "MSCCL: minBytes/maxBytes cannot be negative."
    required = ("inplace",) if target.name == "msccl-legacy" else ("inplace", "outofplace", "minBytes", "maxBytes")
    missing = [name for name in required if name not in root.attrib] if target.runtime_limits else []
    if missing:
        return f"MSCCL: the algo element lacks the required attribute {missing[0]}"
    try:
        ir = read_xml(path)
    except CollsynthError as exc:
        return str(exc)
    if target.name == "msccl-legacy":
        inconsistent = _chunks_inconsistency(ir, coll)
        if inconsistent is not None:
            return inconsistent
    return target_violation(ir, target)


def _chunks_inconsistency(ir: Algo, coll: str) -> str | None:
    """microsoft/msccl (topo.cc) refuses a gpu whose i_chunks (o_chunks), times nRanks for allgather's input
    (reduce_scatter's output), differs from nchunksperloop."""
    in_mult = ir.ngpus if coll == "allgather" else 1
    out_mult = ir.ngpus if coll == "reduce_scatter" else 1
    for gpu in ir.gpus:
        if (gpu.i_chunks > 0 and gpu.i_chunks * in_mult != ir.nchunksperloop) or (
                gpu.o_chunks > 0 and gpu.o_chunks * out_mult != ir.nchunksperloop):
            return (f"Inconsistency between i_chunks/o_chunks ({gpu.i_chunks}/{gpu.o_chunks}) and nchunksperloop "
                    f"({ir.nchunksperloop}) for collective {coll}")
    return None


def collect(source: Path) -> list[Path]:
    """The XML files a loader would read: the file itself, or every regular file of the directory (the
    `msccl-algorithms/` inside an export's topology directory), in sorted order as RCCL reads them."""
    if not source.exists():
        raise DoctorError(f"{source}: no such file or directory; give an XML file or an algorithm directory")
    if source.is_file():
        return [source]
    inner = source / "msccl-algorithms"
    directory = inner if inner.is_dir() else source
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.name != "msccl.env"
                   and p.name != "manifest.json" and not p.name.endswith(".md"))
    if not files:
        raise DoctorError(f"{directory}: no files; point doctor at an algorithm directory or an XML file")
    return files


def selects(target: Target, f: LoadedFile, coll: str, nranks: int, inplace: bool, nbytes: int) -> bool:
    """The runtime's selection rule for one loaded file."""
    count = nbytes // ELEM_BYTES
    return (f.refused is None and f.coll == coll and f.ngpus == nranks and (f.inplace if inplace else f.outofplace)
            and count > 0 and nbytes % ELEM_BYTES == 0 and count % f.nchunksperloop == 0
            and target.selects(nbytes, f.min_bytes, f.max_bytes))


def probe_sizes(files: Sequence[LoadedFile], size: int | None) -> list[int]:
    """The sizes to try: the one asked for, else powers of two from 1 KiB to 16 GiB and, per file, the first and
    last size its range admits and the next one after it (sizes in whole multiples of its nchunksperloop elements)."""
    if size is not None:
        return [size]
    sizes = {1 << k for k in range(10, 35)}
    for f in files:
        unit = ELEM_BYTES * f.nchunksperloop
        first = -(-max(f.min_bytes, 1) // unit) * unit
        sizes.add(first)
        if 0 < f.max_bytes < 1 << 62:
            last = f.max_bytes // unit * unit
            sizes |= {last, last - unit, last + unit}
    return sorted(s for s in sizes if ELEM_BYTES <= s < 1 << 62)


def _why_none(target: Target, files: Sequence[LoadedFile], coll: str, nranks: int, inplace: bool,
              nbytes: int) -> str:
    same = [f for f in files if f.refused is None and f.coll == coll and f.ngpus == nranks
            and (f.inplace if inplace else f.outofplace)]
    if not same:
        return "no loaded file for this collective, rank count and in-place kind"
    count = nbytes // ELEM_BYTES
    if nbytes % ELEM_BYTES:
        return f"{nbytes} bytes is not a whole number of {ELEM_BYTES}-byte elements"
    if all(count % f.nchunksperloop for f in same):
        return f"the element count {count} is not a multiple of any file's nchunksperloop"
    rule = "minBytes <= size < maxBytes" if target.max_bytes_exclusive else \
        "minBytes <= size <= maxBytes (maxBytes 0: no limit)"
    return f"no file's range holds {nbytes} bytes ({rule}); falls back to NCCL/RCCL"


@click.command("doctor")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--target", type=click.Choice(XML_TARGETS), default=DEFAULT_TARGET, show_default=True,
              help="the runtime whose loader and selection rules to replay")
@click.option("--nranks", type=click.IntRange(1), default=None, help="the communicator size (default: every ngpus)")
@click.option("--size", default=None, help="one message size to check (bytes of the larger buffer, e.g. 1MB)")
def doctor(source: Path, target: str, nranks: int | None, size: str | None) -> None:
    """Say which file the target's runtime would load and pick, per collective and size, or why none."""
    runtime = get_target(target)
    nbytes = parse_size(size) if size is not None else None
    files = [loader_verdict(path, runtime) for path in collect(source)]
    problems = 0
    loaded_so_far = 0
    checked: list[LoadedFile] = []
    for f in files:
        if nranks is not None and f.ngpus != nranks and f.refused is None:
            click.echo(f"skip    {f.path.name}: ngpus={f.ngpus}, the communicator has {nranks} ranks (not loaded)")
            continue
        if f.refused is None and runtime.max_algorithms and loaded_so_far >= runtime.max_algorithms:
            f = replace(f, refused=f"MSCCL_MAX_NUM_ALGOS ({runtime.max_algorithms}) reached: {runtime.runtime} "
                                   "loads no more algorithms")
        if f.refused is not None:
            problems += 1
            click.echo(f"REFUSED {f.path.name}: {f.refused}")
        else:
            loaded_so_far += 1
            click.echo(f"loads   {f.path.name}: coll={f.coll} ngpus={f.ngpus} nchunksperloop={f.nchunksperloop} "
                       f"bytes=[{f.min_bytes}, {f.max_bytes or 'inf'}]")
        checked.append(f)
    loaded = [f for f in checked if f.refused is None]
    used: set[Path] = set()
    sizes = probe_sizes(loaded, nbytes)
    keys = sorted({(f.coll, f.ngpus, kind) for f in loaded for kind in (True, False)
                   if (f.inplace if kind else f.outofplace)})
    for coll, ngpus, inplace in keys:
        click.echo(f"{coll} ngpus={ngpus} {'in-place' if inplace else 'out-of-place'}:")
        last = None
        for s in sizes:
            pick = next((f for f in loaded if selects(runtime, f, coll, ngpus, inplace, s)), None)
            line = pick.path.name if pick else "none: " + _why_none(runtime, loaded, coll, ngpus, inplace, s)
            if pick:
                used.add(pick.path)
            if line != last or nbytes is not None:
                label = format_size(s) if s < 1024 or s % 1024 == 0 else f"{s}B"
                click.echo(f"  from {label:>10}: {line}")
                last = line
    for f in loaded:
        if f.path not in used and nbytes is None:
            problems += 1
            click.echo(f"NEVER   {f.path.name}: loaded but never selected (an earlier file takes its sizes, or its "
                       "range or nchunksperloop admits no size)")
    if problems:
        click.echo(f"{problems} problem(s) for {runtime.name}", err=True)
        sys.exit(1)
    click.echo(f"ok: every file loads and is selected by {runtime.name}")


COMMANDS = (doctor,)
