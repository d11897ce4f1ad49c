"""The constants of the MILP pipeline, named and documented in one place, and the names of its stages.

    MilpParameters()                       # the defaults every run uses
    replace(MilpParameters(), tie_us=1e-6)

Budget shares are fractions of the whole run's wall-clock budget (`time_limit`) kept for the stages *after*
a stage: a MILP stage's solver limit is what is left less that reserve, a heuristic stops when only the
reserve is left. Tolerances are in microseconds (times) or relative (ratios)."""

from __future__ import annotations

from dataclasses import dataclass

from collsynth.synth.milp.ordering import TIE_US

# --- stage names (reports carry them; tests and the bench import them instead of spelling them) ----------
GREEDY_ROUTING = "greedy routing+order"
SKETCH_BOUNDS = "sketch bounds"
ROUTING_MILP = "routing MILP"
ROUTING_LINKS_MILP = "routing MILP (links)"
ORDERING = "ordering heuristic"
LOCAL_SEARCH = "route local search"
GROUP_PATTERNS = "group patterns"
GROUP_SPREAD = "group spread"
SCHEDULE_MILP = "schedule MILP"  # the non-combining collective's schedule
DUAL_SCHEDULE_MILP = "schedule (dual) MILP"  # ReduceScatter/Reduce: the AllGather/Broadcast scheduled first
REDUCE_SCHEDULE_MILP = "reduce schedule MILP"  # ... then mirrored into reductions and re-timed
ALLGATHER_SCHEDULE_MILP = "allgather MILP"  # AllReduce: its AllGather half
ALLREDUCE_SCHEDULE_MILP = "allreduce MILP"  # ... and the merged ReduceScatter + AllGather
VERIFY = "verify"

# report statuses the runner writes for stages it does not run
SKIPPED = "skipped"
BUDGET_SPENT = "skipped (budget spent)"


@dataclass(frozen=True)
class MilpParameters:
    """Every tunable constant of the MILP pipeline (module docstring for the units)."""

    # the shortest solver limit a MILP stage gets: the routing MILP gets it even when the budget is spent (so
    # that it still reports a bound); a later MILP stage that cannot have it is skipped
    min_stage_seconds: float = 0.5
    # reserves (shares of the whole budget kept for what follows a stage)
    reserve_after_routing: float = 0.35  # ordering, local search, group patterns and the scheduling MILP
    reserve_after_routing_one_node: float = 0.1  # one node: the scheduling stage is an LP
    reserve_after_search: float = 0.25  # group patterns, group spread and the scheduling MILP
    reserve_after_patterns: float = 0.1875  # group spread and the scheduling MILP
    reserve_after_spread: float = 0.125  # the scheduling MILP
    reserve_after_forward_schedule: float = 0.15  # combining collectives: the reversed schedule's MILP
    reserve_after_schedule: float = 0.03  # building and verifying the algorithm
    # the most one spread MILP of the group-spread stage may take, as a share of the whole budget
    spread_solve_share: float = 0.4
    # route local search: schedules tried per start, by the number of transfers (list scheduling is
    # O(transfers log transfers) per try); above `medium_transfers` the search is off
    search_tries_small: int = 200
    search_tries_medium: int = 20
    small_transfers: int = 600  # up to here every ordering rule is tried per move
    medium_transfers: int = 2500
    # scheduling MILP: re-solved after the orders are rebuilt around the chosen groups, up to this many times
    schedule_rounds: int = 3
    # two makespans closer than this are equal (us): an improvement must beat it
    tie_us: float = TIE_US
    # a gap test never divides by less than this (us)
    gap_floor_us: float = 1e-12
    # the warm start's makespan caps the routing MILP's makespan column, loosened by this (relative, plus tie_us)
    warm_cap_rel: float = 1e-9
    # the links objective keeps the first solve's makespan, loosened by this (relative, plus tie_us)
    keep_makespan_rel: float = 1e-7
    # the proven bound floors the scheduling MILP's makespan column, lowered by this (relative, less tie_us)
    bound_floor_rel: float = 1e-7
    # a warm start violating the scheduling model's rows by more than this is not used
    warm_violation: float = 1e-6
    # a MILP's objective vs the re-evaluated schedule (relative): beyond it the model is wrong
    objective_check_rel: float = 1e-6
    # the proven bound may exceed the schedule by solver tolerance (relative, plus tie_us); beyond it, a bug
    bound_check_rel: float = 1e-6

    def within_gap(self, value: float | None, lower: float | None, gap: float) -> bool:
        """`value` is already within relative `gap` of the proven lower bound: a search has nothing to gain."""
        if value is None or lower is None:
            return False
        return value - lower <= gap * max(abs(value), self.gap_floor_us) + self.gap_floor_us

    def search_tries(self, transfers: int) -> int:
        """Schedules the route local search tries per start for a problem of this many transfers."""
        if transfers <= self.small_transfers:
            return self.search_tries_small
        return self.search_tries_medium if transfers <= self.medium_transfers else 0


DEFAULT_PARAMETERS = MilpParameters()
