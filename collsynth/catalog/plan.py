"""Plan files (TOML): which topologies, collectives, sizes, synthesizers and hand-written programs to catalog.

    name = "dgx1"
    dtype = "float32"                  # data type of the simulated sizes (nccl-tests names work too)
    sizes = "1KB:1GB"                  # LO:HI, doubling as nccl-tests -b/-e/-f 2; or a list ["1KB", "1MB"]
    size_factor = 2                    # optional step factor of a LO:HI range

    [compile]                          # every algorithm is compiled once per combination
    protocols = ["Simple"]             # Simple, LL, LL128
    instances = [1]
    inplace = false                    # or true, or [false, true] (MSCCL picks an XML per call kind)

    [limits]
    time_limit_s = 60                  # per solver call (SMT, MILP); a time-out is recorded, never hidden
    max_chunks = 6                     # default largest chunk count of an SMT frontier
    item_timeout_s = 1800              # a work item still running after this is stopped and recorded as failed

    [[synthesizers]]                   # named synthesizer settings; targets refer to them by name
    name = "frontier"
    kind = "pareto"                    # pareto | instance | least-steps | milp
    max_chunks = 6

    [[targets]]
    topology = "dgx1"                  # built-in name, or a JSON file (relative to the plan file)
    collectives = ["allgather", "allreduce"]
    synthesizers = ["frontier"]        # default: every [[synthesizers]] entry
    library = true                     # hand-written programs that fit (default); false; or a list of names
    root = 0                           # root of rooted collectives (Broadcast, Reduce, ...)

Synthesizer kinds and their settings:
  pareto       max_chunks, time_limit_s, points ("pareto": the Pareto-optimal points; "all": every SAT point)
  instance     chunks, steps, rounds (optional), time_limit_s
  least-steps  chunks, max_steps (optional), time_limit_s
  milp         sketch (file, relative to the plan), size (e.g. "1MB"), solver ("highs" | "cbc"), time_limit_s
  greedy       size (default "1GB"), seed; trees: size, chunks_per_tree (cluster scale, any rank count)
  hierarchical size, sources ("direct,ring,doubling,smt,greedy"), time_limit_s (NxTOPO: every candidate)

`load_plan(path)` parses and checks a plan (every error names the field); `expand_plan(plan)` resolves the
topologies and collectives and returns the work items, each keyed by a hash of what determines its result.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import collsynth
from collsynth.catalog.errors import PlanError
from collsynth.collectives import Collective, resolve_collective
from collsynth.core.caps import CHUNKS_PER_RANK, STEPS
from collsynth.core.errors import CollsynthError
from collsynth.core.units import parse_size
from collsynth.topologies import Topology, resolve_topology

PROTOCOLS = ("Simple", "LL", "LL128")
LIBRARY = "library"
SYNTH_KINDS = ("pareto", "instance", "least-steps", "milp", "greedy", "trees", "hierarchical")

# kind -> {setting: (python types, required)}; the plan's [limits] fill time_limit_s and max_chunks.
_SETTINGS: Mapping[str, Mapping[str, tuple[tuple[type, ...], bool]]] = {
    "pareto": {"max_chunks": ((int,), False), "time_limit_s": ((int, float), False), "points": ((str,), False)},
    "instance": {"chunks": ((int,), True), "steps": ((int,), True), "rounds": ((int,), False),
                 "time_limit_s": ((int, float), False)},
    "least-steps": {"chunks": ((int,), False), "max_steps": ((int,), False), "time_limit_s": ((int, float), False)},
    "milp": {"sketch": ((str,), True), "size": ((str, int), True), "solver": ((str,), False),
             "time_limit_s": ((int, float), False)},
    "greedy": {"size": ((str, int), False), "seed": ((int,), False), "time_limit_s": ((int, float), False)},
    "trees": {"size": ((str, int), False), "chunks_per_tree": ((int,), False), "time_limit_s": ((int, float), False)},
    "hierarchical": {"size": ((str, int), False), "sources": ((str,), False), "time_limit_s": ((int, float), False)},
}

DEFAULT_SIZES = "1KB:1GB"
DEFAULT_TIME_LIMIT_S = 60.0
DEFAULT_MAX_CHUNKS = 6
DEFAULT_ITEM_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class CompileVariant:
    """The options one algorithm is compiled with."""

    protocol: str = "Simple"
    instances: int = 1
    inplace: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "instances": self.instances, "inplace": self.inplace}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompileVariant:
        return cls(str(data.get("protocol", "Simple")), int(data.get("instances", 1)), bool(data.get("inplace", False)))

    def __str__(self) -> str:
        return f"{self.protocol}/i{self.instances}" + ("/inplace" if self.inplace else "")


@dataclass(frozen=True)
class SynthSpec:
    """A named synthesizer setting: kind plus its settings as sorted (name, value) pairs."""

    name: str
    kind: str
    params: tuple[tuple[str, Any], ...]

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)


@dataclass(frozen=True)
class Target:
    topology: str
    collectives: tuple[str, ...]
    synthesizers: tuple[str, ...]
    library: bool | tuple[str, ...] = True
    root: int | None = None


@dataclass(frozen=True)
class Plan:
    name: str
    path: Path | None
    sizes: tuple[int, ...]
    dtype: str
    variants: tuple[CompileVariant, ...]
    synthesizers: tuple[SynthSpec, ...]
    targets: tuple[Target, ...]
    item_timeout_s: float = DEFAULT_ITEM_TIMEOUT_S

    def synthesizer(self, name: str) -> SynthSpec:
        for spec in self.synthesizers:
            if spec.name == name:
                return spec
        raise PlanError(f"no synthesizer named {name!r}")


@dataclass(frozen=True)
class WorkItem:
    """One unit of catalog work: one synthesizer run (or one hand-written program) on one (topology,
    collective), compiled in every variant, interpreted and simulated at every size."""

    topology: Topology = field(compare=False)
    topology_spec: str
    collective: Collective = field(compare=False)
    source: str  # "library" or a synthesizer kind
    params: tuple[tuple[str, Any], ...]  # JSON-able settings (library: the program name)
    variants: tuple[CompileVariant, ...]
    sizes: tuple[int, ...]
    dtype: str
    synth_name: str = ""  # the plan's name for the synthesizer setting ("" for library programs)

    @property
    def fingerprint(self) -> str:
        return self.topology.fingerprint()

    @property
    def collective_name(self) -> str:
        return self.collective.name

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)

    def key_data(self) -> dict[str, Any]:
        """Everything that determines this item's entries (sizes and dtype only affect the simulated times,
        which the builder fills in for new sizes without redoing the item)."""
        # A sketch counts by its content (sketch_sha256), not by where the file lies.
        params = [list(p) for p in self.params if p[0] != "sketch"]
        return {"topology": self.fingerprint, "collective": self.collective.to_dict(), "source": self.source,
                "params": params, "variants": [v.to_dict() for v in self.variants],
                "collsynth": collsynth.__version__}

    @cached_property
    def key(self) -> str:
        blob = json.dumps(self.key_data(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    @property
    def label(self) -> str:
        what = self.param("program") if self.source == LIBRARY else self.synth_name or self.source
        return f"{self.topology.name} {self.collective.name} {what}"

    def __str__(self) -> str:
        return f"{self.label} [{self.key[:10]}]"


# --- parsing -----------------------------------------------------------------------------------------

def load_plan(path: str | Path) -> Plan:
    """Parse and check a plan file (raises PlanError naming the file and field)."""
    from collsynth.core.files import read_text

    plan_path = Path(path)
    text = read_text(plan_path, PlanError, "the plan")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{plan_path}: not valid TOML ({exc}); see plans/quick.toml for an example") from None
    except RecursionError:
        raise PlanError(f"{plan_path}: not valid TOML (nested too deeply); plans nest a few levels") from None
    return parse_plan(data, path=plan_path)


def parse_plan(data: Mapping[str, Any], *, path: Path | None = None) -> Plan:
    """A Plan from parsed TOML (a mapping); `path` anchors relative file names and prefixes messages."""
    where = f"{path}: " if path else "plan: "
    from collsynth.catalog.plan_schema import check_plan_document  # pydantic: only when a plan is read

    check_plan_document(data, where)  # the declared schema (catalog/plan_schema.py) first
    _no_unknown(data, {"name", "dtype", "sizes", "size_factor", "compile", "limits", "synthesizers", "targets"},
                "", where)
    name = _typed(data.get("name", path.stem if path else "plan"), (str,), "name", where)
    dtype = _typed(data.get("dtype", "float32"), (str,), "dtype", where)
    _check_dtype(dtype, where)
    sizes = _sizes(data.get("sizes", DEFAULT_SIZES), data.get("size_factor", 2), where)
    compile_table = _table(data.get("compile", {}), "compile", where)
    _no_unknown(compile_table, {"protocols", "instances", "inplace"}, "compile.", where)
    protocols = _str_list(compile_table.get("protocols", ["Simple"]), "compile.protocols", where)
    if not protocols:
        raise PlanError(f"{where}compile.protocols is empty, so nothing would be built; name at least one of "
                        f"{', '.join(PROTOCOLS)}")
    for proto in protocols:
        if proto not in PROTOCOLS:
            raise PlanError(f"{where}compile.protocols: unknown protocol {proto!r}; use {', '.join(PROTOCOLS)}")
    instances = _int_list(compile_table.get("instances", [1]), "compile.instances", where, minimum=1)
    inplace_value = compile_table.get("inplace", [False])
    inplace = [inplace_value] if isinstance(inplace_value, bool) else inplace_value
    if not isinstance(inplace, list) or not inplace or not all(isinstance(v, bool) for v in inplace):
        raise PlanError(f"{where}'compile.inplace' must be true, false or a list of them, got {inplace_value!r}")
    variants = tuple(CompileVariant(p, i, b) for p in protocols for i in instances for b in dict.fromkeys(inplace))
    limits = _table(data.get("limits", {}), "limits", where)
    _no_unknown(limits, {"time_limit_s", "max_chunks", "item_timeout_s"}, "limits.", where)
    item_timeout = float(_typed(limits.get("item_timeout_s", DEFAULT_ITEM_TIMEOUT_S), (int, float),
                                "limits.item_timeout_s", where))
    if item_timeout <= 0:
        raise PlanError(f"{where}limits.item_timeout_s must be > 0, got {item_timeout}")
    time_limit = float(_typed(limits.get("time_limit_s", DEFAULT_TIME_LIMIT_S), (int, float), "limits.time_limit_s",
                              where))
    if time_limit <= 0:
        raise PlanError(f"{where}limits.time_limit_s must be > 0, got {time_limit}")
    max_chunks = _typed(limits.get("max_chunks", DEFAULT_MAX_CHUNKS), (int,), "limits.max_chunks", where)
    if max_chunks < 1:
        raise PlanError(f"{where}limits.max_chunks must be >= 1, got {max_chunks}")
    synths = tuple(_synth(i, entry, time_limit, max_chunks, path, where)
                   for i, entry in enumerate(_array(data.get("synthesizers", []), "synthesizers", where)))
    names = [s.name for s in synths]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PlanError(f"{where}synthesizers: the name {duplicates[0]!r} is used twice; give each a unique name")
    targets = tuple(_target(i, entry, names, where)
                    for i, entry in enumerate(_array(data.get("targets", []), "targets", where)))
    if not targets:
        raise PlanError(f"{where}no [[targets]]; add at least one, e.g. [[targets]] topology = \"dgx1\" "
                        "collectives = [\"allgather\"]")
    return Plan(name=name, path=path, sizes=sizes, dtype=dtype, variants=variants, synthesizers=synths,
                targets=targets, item_timeout_s=item_timeout)


def _synth(index: int, entry: Any, time_limit: float, max_chunks: int, path: Path | None, where: str) -> SynthSpec:
    label = f"synthesizers[{index}]"
    table = _table(entry, label, where)
    kind = _typed(table.get("kind"), (str,), f"{label}.kind", where, required=True)
    if kind not in SYNTH_KINDS:
        raise PlanError(f"{where}{label}.kind: unknown synthesizer {kind!r}; use one of {', '.join(SYNTH_KINDS)}")
    name = _typed(table.get("name", kind), (str,), f"{label}.name", where)
    if name == LIBRARY:
        raise PlanError(f"{where}{label}.name: 'library' is reserved for hand-written programs; choose another name")
    schema = _SETTINGS[kind]
    _no_unknown(table, {"kind", "name", *schema}, f"{label}.", where)
    params: dict[str, Any] = {}
    for key, (types, required) in schema.items():
        if key in table:
            params[key] = _typed(table[key], types, f"{label}.{key}", where)
        elif required:
            raise PlanError(f"{where}{label}: a {kind} synthesizer needs '{key}'")
    params.setdefault("time_limit_s", time_limit)
    params["time_limit_s"] = float(params["time_limit_s"])
    if params["time_limit_s"] <= 0:
        raise PlanError(f"{where}{label}.time_limit_s must be > 0")
    for key in ("max_chunks", "chunks", "steps", "rounds", "max_steps"):
        if key in params and params[key] < 1:
            raise PlanError(f"{where}{label}.{key} must be >= 1, got {params[key]}")
        if key in params:
            (CHUNKS_PER_RANK if "chunks" in key else STEPS).check(params[key], f"{where}{label}.{key}", PlanError)
    if kind == "pareto":
        params.setdefault("max_chunks", max_chunks)
        params.setdefault("points", "pareto")
        if params["points"] not in ("pareto", "all"):
            raise PlanError(f"{where}{label}.points must be 'pareto' or 'all', got {params['points']!r}")
    if "size" in params:
        params["size"] = _size(params["size"], f"{label}.size", where)
    if kind == "milp":
        params.setdefault("solver", "highs")
        if params["solver"] not in ("highs", "cbc"):
            raise PlanError(f"{where}{label}.solver must be 'highs' or 'cbc', got {params['solver']!r}")
        sketch = Path(params["sketch"])
        if not sketch.is_absolute() and path is not None:
            sketch = path.parent / sketch
        if not sketch.is_file():
            raise PlanError(f"{where}{label}.sketch: no such file {sketch}")
        params["sketch"] = str(sketch)
        # The sketch's content, not its path, decides the result.
        params["sketch_sha256"] = hashlib.sha256(sketch.read_bytes()).hexdigest()[:16]
    return SynthSpec(name=name, kind=kind, params=tuple(sorted(params.items())))


def _target(index: int, entry: Any, synth_names: Sequence[str], where: str) -> Target:
    label = f"targets[{index}]"
    table = _table(entry, label, where)
    _no_unknown(table, {"topology", "collectives", "synthesizers", "library", "root"}, f"{label}.", where)
    topology = _typed(table.get("topology"), (str,), f"{label}.topology", where, required=True)
    collectives = tuple(_str_list(table.get("collectives"), f"{label}.collectives", where, required=True))
    if not collectives:
        raise PlanError(f"{where}{label}.collectives is empty; name at least one collective")
    synths = tuple(_str_list(table.get("synthesizers", list(synth_names)), f"{label}.synthesizers", where))
    for name in synths:
        if name not in synth_names:
            known = ", ".join(synth_names) or "none defined"
            raise PlanError(f"{where}{label}.synthesizers: no [[synthesizers]] entry named {name!r} ({known})")
    library_value = table.get("library", True)
    library: bool | tuple[str, ...]
    if isinstance(library_value, bool):
        library = library_value
    else:
        library = tuple(_str_list(library_value, f"{label}.library", where))
    root = table.get("root")
    if root is not None:
        root = _typed(root, (int,), f"{label}.root", where)
    return Target(topology=topology, collectives=collectives, synthesizers=synths, library=library, root=root)


# --- expansion ---------------------------------------------------------------------------------------

def expand_plan(plan: Plan) -> list[WorkItem]:
    """Resolve every target's topology and collectives; one work item per synthesizer setting and per
    fitting hand-written program. Raises PlanError for unknown names (naming the target)."""
    from collsynth.catalog.sources import library_names

    items: list[WorkItem] = []
    seen: set[str] = set()
    for index, target in enumerate(plan.targets):
        where = f"{plan.path}: targets[{index}]" if plan.path else f"plan: targets[{index}]"
        topology = _resolve_topology(target.topology, plan.path, where)
        for coll_spec in target.collectives:
            try:
                collective = resolve_collective(_relative(coll_spec, plan.path), topology.num_ranks, root=target.root)
            except CollsynthError as exc:
                raise PlanError(f"{where}.collectives: {exc}") from None
            candidates: list[WorkItem] = []
            for synth_name in target.synthesizers:
                spec = plan.synthesizer(synth_name)
                candidates.append(WorkItem(topology=topology, topology_spec=target.topology, collective=collective,
                                           source=spec.kind, params=spec.params, variants=plan.variants,
                                           sizes=plan.sizes, dtype=plan.dtype, synth_name=spec.name))
            if target.library is not False:
                names = library_names(topology, collective)
                if target.library is not True:
                    wanted = {n.lower().replace("-", "_") for n in target.library}
                    _check_library_names(wanted, where)
                    names = [n for n in names if n in wanted]
                for name in names:
                    candidates.append(WorkItem(topology=topology, topology_spec=target.topology,
                                               collective=collective, source=LIBRARY, params=(("program", name),),
                                               variants=plan.variants, sizes=plan.sizes, dtype=plan.dtype))
            for item in candidates:
                if item.key not in seen:
                    seen.add(item.key)
                    items.append(item)
    return items


def _check_library_names(wanted: set[str], where: str) -> None:
    from collsynth.algorithms import LIBRARY as PROGRAMS

    unknown = sorted(wanted - set(PROGRAMS))
    if unknown:
        raise PlanError(f"{where}.library: unknown program {unknown[0]!r}; `collsynth algorithms list` shows them")


def _resolve_topology(spec: str, plan_path: Path | None, where: str) -> Topology:
    try:
        return resolve_topology(_relative(spec, plan_path))
    except CollsynthError as exc:
        raise PlanError(f"{where}.topology: {exc}") from None


def _relative(spec: str, plan_path: Path | None) -> str:
    """A file name relative to the plan's directory when such a file exists there."""
    if plan_path is not None and spec.endswith(".json") and not Path(spec).is_absolute():
        candidate = plan_path.parent / spec
        if candidate.is_file():
            return str(candidate)
    return spec


# --- small typed readers --------------------------------------------------------------------------------

def _sizes(value: Any, factor: Any, where: str) -> tuple[int, ...]:
    factor = _typed(factor, (int,), "size_factor", where)
    if factor < 2:
        raise PlanError(f"{where}size_factor must be >= 2, got {factor}")
    if isinstance(value, str):
        if ":" not in value:
            return (_size(value, "sizes", where),)
        lo_text, _, hi_text = value.partition(":")
        lo, hi = _size(lo_text, "sizes", where), _size(hi_text, "sizes", where)
        if lo < 1 or hi < lo:
            raise PlanError(f"{where}sizes: {value!r} is empty; write LO:HI with 1 <= LO <= HI, e.g. \"1KB:1GB\"")
        out, size = [], lo
        while size <= hi:
            out.append(size)
            size *= factor
        return tuple(out)
    if isinstance(value, list) and value:
        sizes = sorted({_size(v, "sizes", where) for v in value})
        if sizes[0] < 1:
            raise PlanError(f"{where}sizes: sizes must be >= 1 byte")
        return tuple(sizes)
    raise PlanError(f"{where}sizes: write a range \"1KB:1GB\" or a list [\"1KB\", \"1MB\"]")


def _size(value: Any, label: str, where: str) -> int:
    try:
        return parse_size(value)
    except CollsynthError as exc:
        raise PlanError(f"{where}{label}: {exc}") from None


def _check_dtype(dtype: str, where: str) -> None:
    from collsynth.sim import dtype_info

    try:
        dtype_info(dtype)
    except CollsynthError as exc:
        raise PlanError(f"{where}dtype: {exc}") from None


def _typed(value: Any, types: tuple[type, ...], label: str, where: str, *, required: bool = False) -> Any:
    if value is None:
        if required:
            raise PlanError(f"{where}'{label}' is missing")
        return None
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        names = " or ".join("number" if t is float else {int: "integer", str: "string"}.get(t, t.__name__)
                            for t in types)
        raise PlanError(f"{where}'{label}' must be a {names}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise PlanError(f"{where}'{label}' must be a finite number, got {value!r}")
    return value


def _table(value: Any, label: str, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PlanError(f"{where}'{label}' must be a table, got {value!r}")
    return value


def _array(value: Any, label: str, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise PlanError(f"{where}'{label}' must be an array of tables ([[{label}]])")
    return value


def _str_list(value: Any, label: str, where: str, *, required: bool = False) -> list[str]:
    if value is None and required:
        raise PlanError(f"{where}'{label}' is missing")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlanError(f"{where}'{label}' must be a list of strings, got {value!r}")
    return value


def _int_list(value: Any, label: str, where: str, *, minimum: int) -> list[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise PlanError(f"{where}'{label}' must be a list of integers, got {value!r}")
    if not value:
        raise PlanError(f"{where}'{label}' is empty, so nothing would be built; give at least one value")
    for v in value:
        if v < minimum:
            raise PlanError(f"{where}'{label}': {v} is below {minimum}")
    return value


def _no_unknown(table: Mapping[str, Any], known: set[str], prefix: str, where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(sorted(known))}"
        raise PlanError(f"{where}unknown key '{prefix}{unknown[0]}'; {hint}")
