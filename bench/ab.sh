#!/usr/bin/env bash
# A/B of two edgegw builds: the same scenarios in alternating rounds, each
# build's CPU per round and its median, the second's ratio to the first's.
# A single run at sensor rates varies by about 10 % on a shared machine
# (bench/README.md, issue 16), so a claim about a change rests on rounds,
# and their raw data is kept next to the table.
#
#   bench/ab.sh A B      A, B: git revisions (built here) or edgegw binaries
#
# Knobs (environment): BENCH_AB_ROUNDS (default 4), BENCH_AB_SCENARIOS
# (default "sensors"), and run.sh's BENCH_SENSORS_DURATION, BENCH_PORT_*.
# Writes bench/results/ab-<date>.md, ab-raw-<date>.jsonl and ab-latest.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/rounds.sh
. bench/rounds.sh

[[ $# -eq 2 ]] || { echo "usage: bench/ab.sh A B (git revisions or edgegw binaries)" >&2; exit 2; }
ROUNDS=${BENCH_AB_ROUNDS:-4}
SCENARIOS=${BENCH_AB_SCENARIOS:-"sensors"}
GO=${GO:-go}
stamp=$(date +%Y-%m-%d-%H%M%S)
tmp=$(mktemp -d /tmp/edgegw-ab.XXXXXX)
cleanup() {
  for wt in "$tmp"/wt-*; do [[ -d $wt ]] && git worktree remove --force "$wt" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# binary ARG N -> sets bin and label: ARG itself if it is a file, else the
# revision ARG built the way it ships (as run.sh builds edgegw).
binary() {
  if [[ -f $1 ]]; then
    bin=$(realpath "$1"); label=$(basename "$1")
    return
  fi
  local rev; rev=$(git rev-parse --short "$1^{commit}") || { echo "$1: neither a file nor a git revision" >&2; exit 2; }
  git worktree add -q --detach "$tmp/wt-$2" "$rev"
  (cd "$tmp/wt-$2" && CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o "$tmp/edgegw-$2" ./cmd/edgegw)
  bin=$tmp/edgegw-$2; label=$rev
}
binary "$1" a; bin_a=$bin; label_a=$label
binary "$2" b; bin_b=$bin; label_b=$label
[[ $label_a != "$label_b" ]] || { label_a=$label_a-a; label_b=$label_b-b; }

echo "== ab: $ROUNDS rounds of $SCENARIOS, $label_a ($bin_a) against $label_b ($bin_b)"
for r in $(seq "$ROUNDS"); do
  for sc in $SCENARIOS; do
    # The order alternates, so neither build always runs second.
    pair=("$bin_a:$label_a" "$bin_b:$label_b")
    (( r % 2 == 0 )) && pair=("$bin_b:$label_b" "$bin_a:$label_a")
    for p in "${pair[@]}"; do
      run_round "$r" "$sc" "${p#*:}" EDGEGW_BIN="${p%%:*}" EDGEGW_LABEL="${p#*:}" BENCH_BROKERS=edgegw
    done
  done
done

rounds_report ab "edgegw $label_a against $label_b $stamp ($ROUNDS rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
