"""`collsynth topo list|show|draw`: the built-in topologies and topology files."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import click

from collsynth.cli.params import OutputPath

if TYPE_CHECKING:  # rich and the topology library (numpy, networkx) load when a command runs, not for --help
    from rich.console import Console

    from collsynth.topologies import Topology

NAME_HELP = "a built-in (ring:8, dgx2, 2xndv2, ...; see `collsynth topo list`) or a JSON file (ours or TACCL's)"
DEFAULT_LINK_ROWS = 64


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False)


@click.group("topo")
def topo() -> None:
    """Topologies: list the built-ins, show one, draw one."""


@topo.command("list")
def list_command() -> None:
    """The built-in topologies, their parameters and rank counts, and the link classes they use."""
    from rich.table import Table

    from collsynth.topologies import BUILTIN_TOPOLOGIES, LINK_CLASSES

    table = Table(title="Built-in topologies", title_justify="left")
    for column in ("name", "parameters", "ranks", "description"):
        table.add_column(column, no_wrap=column != "description")
    for spec in BUILTIN_TOPOLOGIES.values():
        name = spec.name + "".join(f" | {alias}" for alias in spec.aliases)
        table.add_row(name, spec.params or "-", spec.ranks_text, spec.description)
    console = _console()
    console.print(table)
    console.print("Several nodes: NxNAME (e.g. 2xndv2, 4xdgx2, 2xring:4): N copies joined by InfiniBand through "
                  "each node's NICs.\nFiles: a path to a JSON topology (docs/formats.md) or a TACCL profile; "
                  "Nx<path> for N nodes.")
    classes = Table(title="Link classes (alpha-beta costs)", title_justify="left")
    for column in ("class", "kind", "alpha us", "beta us/MB", "source"):
        classes.add_column(column, no_wrap=column in ("kind", "alpha us", "beta us/MB"))
    for lc in LINK_CLASSES:
        classes.add_row(lc.name, lc.kind, f"{lc.alpha_us:g}", f"{lc.beta_us_per_mb:g}", lc.source)
    console.print(classes)


def _summary(topology: Topology) -> str:
    kinds = Counter(link.kind for link in topology.link_list)
    lines = [f"{topology.name}: {topology.description}" if topology.description else topology.name,
             f"ranks {topology.num_ranks}, nodes {topology.num_machines}, links {len(topology.link_list)} ("
             + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + f"), switch budgets {len(topology.switches)}",
             f"fingerprint {topology.fingerprint()}"]
    return "\n".join(lines)


@topo.command("show", help="Links (src, dst, kind, bandwidth, alpha, beta), switch budgets, nodes and NICs of "
                             "NAME, and its fingerprint. NAME is " + NAME_HELP + ".")
@click.argument("name")
@click.option("--all", "show_all", is_flag=True, help=f"list every link and switch (default: the first "
                                                       f"{DEFAULT_LINK_ROWS})")
@click.option("--json", "as_json", is_flag=True, help="print the topology in collsynth's JSON schema instead")
def show_command(name: str, show_all: bool, as_json: bool) -> None:
    from rich.table import Table

    from collsynth.topologies import resolve_topology

    topology = resolve_topology(name)
    if as_json:
        click.echo(json.dumps(topology.to_dict(), indent=1))
        return
    console = _console()
    console.print(_summary(topology))
    limit = None if show_all else DEFAULT_LINK_ROWS

    links = sorted(topology.link_list, key=lambda x: (x.src, x.dst))
    table = Table(title="Links", title_justify="left")
    for column in ("src", "dst", "kind", "bandwidth", "alpha us", "beta us/MB"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for link in links[:limit]:
        table.add_row(str(link.src), str(link.dst), link.kind, str(link.bandwidth), f"{link.alpha_us:g}",
                      f"{link.beta_us_per_mb:.4g}")
    console.print(table)
    if limit is not None and len(links) > limit:
        console.print(f"... {len(links) - limit} more links (--all lists them)")

    if topology.switches:
        switches = Table(title="Switch budgets (links sharing one budget)", title_justify="left")
        for column in ("name", "links", "chunks/round", "beta us/MB", "covers"):
            switches.add_column(column, justify="left" if column in ("name", "covers") else "right")
        for switch in topology.switches[:limit]:
            pairs = sorted(switch.links)
            covers = ", ".join(f"{a}->{b}" for a, b in pairs[:4]) + (", ..." if len(pairs) > 4 else "")
            switches.add_row(switch.name, str(len(pairs)), str(switch.bandwidth), f"{switch.beta_us_per_mb:.4g}",
                             covers)
        console.print(switches)
        if limit is not None and len(topology.switches) > limit:
            console.print(f"... {len(topology.switches) - limit} more switch budgets (--all lists them)")

    if topology.machines is not None:
        members: dict[int, list[int]] = {}
        for rank, node in enumerate(topology.machines):
            members.setdefault(node, []).append(rank)
        console.print("Nodes: " + "; ".join(f"node {n}: ranks {_ranges(r)}" for n, r in sorted(members.items())))
    if topology.nics:
        console.print("NICs: " + "; ".join(f"nic {i}: ranks {_ranges(list(nic))}"
                                           for i, nic in enumerate(topology.nics)))


def _ranges(ranks: list[int]) -> str:
    """`0-7,9` for [0..7, 9]."""
    parts = []
    start = prev = None
    for r in sorted(ranks):
        if start is None:
            start = prev = r
        elif prev is not None and r == prev + 1:
            prev = r
        else:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = r
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)


@topo.command("draw", help="Draw NAME: GPUs grouped by node, links coloured by kind and as wide as their "
                             "bandwidth, switches and NICs as squares. NAME is " + NAME_HELP + ".")
@click.argument("name")
@click.option("-o", "--output", required=True, type=OutputPath(dir_okay=False),
              help="picture to write: .png, .svg or .pdf")
def draw_command(name: str, output: str) -> None:
    from collsynth.core.caps import DRAW_RANKS
    from collsynth.topologies import draw_topology, resolve_topology
    from collsynth.topologies.library import parse_builtin
    from collsynth.topologies.model import TopologyError

    try:  # a built-in's size is known before it is built (fully_connected:2000 would take a while)
        spec, params = parse_builtin(name)
        DRAW_RANKS.check(spec.ranks(*params), f"topo draw {name}")
    except TopologyError:
        pass  # not a one-node built-in name: resolve_topology says what it is
    topology = resolve_topology(name)
    DRAW_RANKS.check(topology.num_ranks, f"topo draw {name}")
    path = draw_topology(topology, output)
    click.echo(f"wrote {path} ({topology.name}: {topology.num_ranks} ranks, {len(topology.link_list)} links)")


COMMANDS = (topo,)
