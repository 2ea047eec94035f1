#!/usr/bin/env bash
# The Go floor (issue 16): the sensor-fleet scenarios run by edgegw, by
# bench/gofloor in its two designs (a goroutine per connection; one event
# loop) and by mosquitto, in alternating rounds, so that what the Go
# runtime alone costs at sensor rates stands next to edgegw and mosquitto
# measured the same way in the same run. See bench/README.md "The Go floor".
# Knobs (environment):
#   BENCH_FLOOR_ROUNDS     rounds (default 3)
#   BENCH_FLOOR_SCENARIOS  default "sensors sensors-local"
#   BENCH_FLOOR_BROKERS    default "edgegw gofloor gofloor-epoll mosquitto"
#   EDGEGW_BIN             an edgegw binary to measure instead of building one
# and run.sh's BENCH_SENSORS_DURATION, BENCH_PORT_*, MOSQUITTO.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/rounds.sh
. bench/rounds.sh

ROUNDS=${BENCH_FLOOR_ROUNDS:-3}
SCENARIOS=${BENCH_FLOOR_SCENARIOS:-"sensors sensors-local"}
BROKERS=${BENCH_FLOOR_BROKERS:-"edgegw gofloor gofloor-epoll mosquitto"}
GO=${GO:-go}
stamp=$(date +%Y-%m-%d-%H%M%S)
tmp=$(mktemp -d /tmp/edgegw-floor.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# One edgegw binary for every round, built the way it ships (as run.sh).
if [[ -z ${EDGEGW_BIN:-} ]]; then
  CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o bin/edgegw ./cmd/edgegw
  EDGEGW_BIN=$PWD/bin/edgegw
fi
export EDGEGW_BIN

# rotated BROKERS ROUND: the brokers starting with the ROUND-th, so that no
# broker always runs first or last (after the others warmed the machine).
rotated() {
  local -a b
  read -r -a b <<<"$1"
  local i
  for ((i = 0; i < ${#b[@]}; i++)); do echo "${b[(i + $2 - 1) % ${#b[@]}]}"; done
}

echo "== floor: $ROUNDS rounds of $SCENARIOS by $BROKERS"
for r in $(seq "$ROUNDS"); do
  for sc in $SCENARIOS; do
    for b in $(rotated "$BROKERS" "$r"); do
      run_round "$r" "$sc" "$b" BENCH_BROKERS="$b"
    done
  done
done

rounds_report floor "edgegw, the Go floor and mosquitto $stamp ($ROUNDS rounds, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
