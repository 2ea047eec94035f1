# shellcheck shell=bash disable=SC2154 # tmp, stamp: set by the sourcing script
# What the round-based benchmarks (floor.sh, ab.sh) share, sourced after
# `cd` to the repository. The sourcing script sets tmp (its work
# directory) and stamp (the run's date) first.

# run_round R SCENARIO LABEL [VAR=VALUE...]: one run.sh run of SCENARIO
# with the variables set (which broker, which binary), its progress line
# (the one for LABEL) printed, and its raw record added to
# $tmp/raw.jsonl. A failed run prints run.sh's output and ends the script.
run_round() {
  local r=$1 sc=$2 label=$3
  shift 3
  env "$@" BENCH_RESULTS="$tmp/run" BENCH_SCENARIOS="$sc" ./bench/run.sh >"$tmp/run.out" 2>&1 ||
    { cat "$tmp/run.out" >&2; exit 1; }
  echo "   round $r $(grep -E "^   $sc +$label " "$tmp/run.out" | sed 's/^ *//')"
  cat "$tmp"/run/raw-*.jsonl >>"$tmp/raw.jsonl"
  rm -rf "$tmp/run"
}

# rounds_report NAME TITLE: $tmp/raw.jsonl kept as
# bench/results/NAME-raw-$stamp.jsonl, and its rounds table
# (bench-report -floor) as NAME-$stamp.md and NAME-latest.md.
rounds_report() {
  mkdir -p bench/results
  cp "$tmp/raw.jsonl" "bench/results/$1-raw-$stamp.jsonl"
  bin/bench-report -floor -in "$tmp/raw.jsonl" -md "bench/results/$1-$stamp.md" \
    -latest "bench/results/$1-latest.md" -title "$2"
}
