"""The IR catalog: plan -> work items -> synthesize/lower/compile/interpret/simulate -> SQLite index and
content-addressed XML -> per-size winners -> MSCCL/RCCL export (DESIGN.md, "Catalog").

    plan = load_plan("plans/quick.toml")
    summary = build_catalog(plan, "catalog.sqlite", jobs=2)
    with Catalog("catalog.sqlite") as catalog:
        ranked = rank_entries(catalog, "dgx1", "allgather", 1 << 20)
        write_export(catalog, plan_export(catalog), "export/")
"""

from collsynth.catalog.build import BuildEvent, BuildSummary, build_catalog, resimulate_missing, run_items
from collsynth.catalog.db import Catalog, EntryRow, ItemRow
from collsynth.catalog.errors import CatalogError, PlanError
from collsynth.catalog.expand import expand_plan
from collsynth.catalog.export import ExportGroup, ExportSummary, loader_config, plan_export, write_export
from collsynth.catalog.pipeline import check_program, run_item, simulate_points
from collsynth.catalog.plan import CompileVariant, Plan, SynthSpec, Target, WorkItem, load_plan, parse_plan
from collsynth.catalog.query import Ranked, find_topology, rank_entries
from collsynth.catalog.results import EntryResult, ItemResult, SimPoint
from collsynth.catalog.select import SizeRange, Winner, crossover, merge_ranges, size_ranges, winners_per_size
from collsynth.catalog.store import load_xml_text, store_xml, xml_relpath

__all__ = [
    "BuildEvent", "BuildSummary", "Catalog", "CatalogError", "CompileVariant", "EntryResult", "EntryRow",
    "ExportGroup", "ExportSummary", "ItemResult", "ItemRow", "Plan", "PlanError", "Ranked", "SimPoint", "SizeRange",
    "SynthSpec", "Target", "Winner", "WorkItem", "build_catalog", "check_program", "crossover", "expand_plan",
    "find_topology", "load_plan", "load_xml_text", "loader_config", "merge_ranges", "parse_plan", "plan_export",
    "rank_entries", "resimulate_missing", "run_item", "run_items", "simulate_points", "size_ranges", "store_xml",
    "winners_per_size", "write_export", "xml_relpath",
]
