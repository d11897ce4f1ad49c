#!/usr/bin/env bash
# Run every Ctrl-C/SIGTERM test N times in a row (issue 16: "green 50 times in a row") and count the results.
# Usage: tests/cli/repeat_signals.sh [N] [LOG]   (from the repository root; default N=50, LOG=signals.log)
# The cases (slow-marked variants included: -m ""): the real-signal tests of every long command
# (tests/cli/test_signals.py: pareto, milp/CBC, greedy, auto, tune, regress --jobs 2; the entry's SIGTERM and
# start-up Ctrl-C; the catalog build's signals; the worker pool's start-up), the in-process interrupt tests of
# milp, auto, regress, tune, pareto, report drawing and catalog build (and, for every command that runs a solver,
# that the interrupted frames are dropped: test_interrupt_frames.py), and the native-call cases (
# HiGHS, CBC, finalizers). Each round runs under `timeout` (ROUND_TIMEOUT_S, default 900) and pytest-timeout
# (thread method, 300 s a test), niced; odd rounds with SIGINT ignored. A failing round's output goes to LOG.failures;
# a round that outlives its limit also leaves its native stacks in LOG.stacks and Python's (faulthandler) in LOG.failures;
# a round still exiting 10 s after pytest's summary leaves its native stacks in LOG.exitstacks.
set -u
rounds=${1:-50}
log=${2:-signals.log}
python=${PYTHON:-.venv/bin/python}
: > "$log"
: > "$log.failures"
: > "$log.stacks"
: > "$log.exitstacks"
round_out=$(mktemp)
trap 'rm -f "$round_out"' EXIT
bad_rounds=0
for round in $(seq 1 "$rounds"); do
  started=$(date +%s)
  # odd rounds start pytest with SIGINT ignored, as a background job without job control (nohup, `cmd &` in a
  # script) does; even rounds with it at its default, as a terminal or CI step does (`timeout` resets it)
  ignore=""
  [ $((round % 2)) -eq 1 ] && ignore="trap '' INT; "
  limit=${ROUND_TIMEOUT_S:-900}
  # A round past its limit (a hang, e.g. at exit after every test passed) gets its native stacks (gdb) and then
  # SIGABRT, on which Python's faulthandler prints every thread's Python stack; SIGKILL 30 s later.
  PYTHONFAULTHANDLER=1 nice timeout -s ABRT -k 30 "$limit" sh -c "${ignore}exec \"\$0\" \"\$@\"" "$python" -m pytest -m "" -p no:randomly -p no:cacheprovider -rA \
    --no-header --timeout 300 -o timeout_method=thread \
    tests/cli/test_signals.py \
    "tests/cli/test_entry.py::test_sigterm_is_handled_like_ctrl_c" \
    "tests/cli/test_entry.py::test_ctrl_c_during_start_up_prints_no_traceback" \
    "tests/cli/test_entry.py::test_sigterm_during_a_pareto_sweep_keeps_the_finished_points" \
    tests/catalog/test_catalog_build_claims.py::test_signals_keep_finished_work_and_leave_nothing_behind \
    tests/catalog/test_catalog_build.py::test_ctrl_c_keeps_finished_items_and_releases_claims \
    tests/catalog/test_catalog_build.py::test_ctrl_c_in_a_parallel_build_stops_workers \
    tests/cli/test_interrupt_keeps_work.py tests/cli/test_interrupt_frames.py \
    tests/synth/test_milp_interrupt.py \
    tests/synth/test_report_links.py::test_ctrl_c_while_drawing_the_frontier_leaves_no_dangling_link \
    tests/synth/test_sccl_cli.py::test_ctrl_c_keeps_finished_points \
    tests/synth/test_sccl_pareto.py::test_ctrl_c_keeps_the_finished_points \
    tests/tune/test_tune_cli.py::test_ctrl_c_keeps_the_sizes_already_tuned \
    tests/tune/test_tune_search.py::test_interrupted_tuning_keeps_finished_sizes \
    tests/core/test_signal_pools.py tests/core/test_signals_finalizers.py tests/core/test_signals_frames.py \
    tests/encodings/test_milp_highs_interrupt.py \
    tests/encodings/test_milp_model_cbc.py::test_overrunning_cbc_is_interrupted_and_its_solution_read \
    tests/encodings/test_milp_model_cbc.py::test_cbc_ignoring_sigint_is_killed_and_warm_start_kept \
    tests/encodings/test_milp_model_cbc.py::test_keyboard_interrupt_stops_cbc \
    > "$round_out" 2>&1 &
  round_pid=$!
  waited=0
  summary_at=""  # when pytest printed its summary: the rest of the round is its exit (an exit hang shows here)
  while kill -0 "$round_pid" 2>/dev/null; do
    sleep 5
    waited=$((waited + 5))
    if [ -z "$summary_at" ] && grep -qE "^(=+ )?[0-9]+ (passed|failed).* in [0-9.]+s" "$round_out"; then
      summary_at=$waited
    elif [ -n "$summary_at" ] && [ "$waited" -eq $((summary_at + 10)) ] && command -v gdb > /dev/null; then
      # still exiting 10 s after the summary: what the exit waits for (native stacks, once a round)
      for pid in $(pgrep -P "$round_pid"); do
        { echo "===== round $round exiting for $((waited - summary_at)) s after its summary: native stacks of $pid"
          timeout 15 gdb -p "$pid" -batch -ex "thread apply all bt 30" 2>&1 | grep -E "^(Thread|#)"; } >> "$log.exitstacks"
      done
    fi
    if [ "$waited" -eq $((limit - 20)) ] && command -v gdb > /dev/null; then
      for pid in $(pgrep -P "$round_pid"); do
        { echo "===== round $round still running after $waited s: native stacks of $pid"
          timeout 15 gdb -p "$pid" -batch -ex "thread apply all bt 30" 2>&1 | grep -E "^(Thread|#)"; } >> "$log.stacks"
      done
    fi
  done
  wait "$round_pid"
  status=$?
  grep -E "^(PASSED|FAILED|ERROR) " "$round_out" | sed "s/^/round $round: /" >> "$log"
  if [ "$status" -ne 0 ] || grep -qE "^(FAILED|ERROR) " "$round_out"; then
    { echo "===== round $round (pytest exit $status)"; cat "$round_out"; } >> "$log.failures"
    bad_rounds=$((bad_rounds + 1))
  fi
  took=$(( $(date +%s) - started ))
  exit_s=$([ -n "$summary_at" ] && echo "$((waited - summary_at))" || echo "?")
  echo "round $round: $(grep -c "^round $round: PASSED" "$log") passed, $(grep -cE "^round $round: (FAILED|ERROR)" "$log") failed, exit $status, $took s (exit after the summary: <= $exit_s s)"
done
echo "total: $(grep -c ': PASSED' "$log") passed, $(grep -cE ': (FAILED|ERROR)' "$log") failed; $((rounds - bad_rounds)) of $rounds rounds green"
