#!/usr/bin/env bash
# Run every Ctrl-C/SIGTERM test N times in a row (issue 16: "green 50 times in a row") and count the results.
# Usage: tests/cli/repeat_signals.sh [N] [LOG]   (from the repository root; default N=50, LOG=signals.log)
# The cases: tests/cli/test_signals.py (pareto, milp/CBC, greedy, auto, tune, regress --jobs 2; SIGINT and
# SIGTERM each), the entry's SIGTERM/start-up Ctrl-C tests, the catalog build's signal tests and the worker
# pool's start-up cases (tests/core/test_signal_pools.py). A failing round's whole output goes to LOG.failures.
set -u
rounds=${1:-50}
log=${2:-signals.log}
python=${PYTHON:-.venv/bin/python}
: > "$log"
: > "$log.failures"
round_out=$(mktemp)
trap 'rm -f "$round_out"' EXIT
for round in $(seq 1 "$rounds"); do
  "$python" -m pytest -m "" -p no:randomly -q -rA --no-header \
    tests/cli/test_signals.py \
    "tests/cli/test_entry.py::test_sigterm_is_handled_like_ctrl_c" \
    "tests/cli/test_entry.py::test_ctrl_c_during_start_up_prints_no_traceback" \
    "tests/cli/test_entry.py::test_sigterm_during_a_pareto_sweep_keeps_the_finished_points" \
    tests/catalog/test_catalog_build_claims.py::test_signals_keep_finished_work_and_leave_nothing_behind \
    tests/core/test_signal_pools.py \
    > "$round_out" 2>&1
  grep -E "^(PASSED|FAILED|ERROR) " "$round_out" | sed "s/^/round $round: /" >> "$log"
  if grep -qE "^(FAILED|ERROR) " "$round_out"; then
    { echo "===== round $round"; cat "$round_out"; } >> "$log.failures"
  fi
  echo "round $round: $(grep -c "^round $round: PASSED" "$log") passed, $(grep -cE "^round $round: (FAILED|ERROR)" "$log") failed"
done
echo "total: $(grep -c ': PASSED' "$log") passed, $(grep -cE ': (FAILED|ERROR)' "$log") failed over $rounds rounds"
