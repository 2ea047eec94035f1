# shellcheck shell=bash
# What the bridge benchmarks (drain.sh, lanes.sh) share, sourced after
# `cd` to the repository: a work directory, the build, the cloud broker,
# starting and stopping a run's processes. They set GO, MOSQUITTO,
# PORT_UP (the cloud broker) and PORT_GW (the gateway's listener) first.

# bench_init NAME: the results directory, a work directory (removed at
# exit with every process in pids), the run's stamp and its raw file.
# shellcheck disable=SC2034 # stamp, results, raw: the sourcing script's
bench_init() {
  stamp=$(date +%Y-%m-%d-%H%M%S)
  results=bench/results
  mkdir -p bin "$results"
  work=$(mktemp -d "/tmp/edgegw-$1.XXXXXX")
  raw="$work/raw.jsonl"
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# bench_build REPORT: the generator, bench/REPORT as bin/REPORT-report
# (drainreport: bin/drain-report), and edgegw built as it ships (static,
# no cgo) unless EDGEGW_BIN names a binary to measure; sets EDGEGW.
bench_build() {
  echo "== build"
  $GO build -o bin/edgegw-bench ./cmd/edgegw-bench
  $GO build -o "bin/${1%report}-report" "./bench/$1"
  # shellcheck disable=SC2034 # used by the sourcing script
  EDGEGW=${EDGEGW_BIN:-bin/edgegw}
  [[ -n ${EDGEGW_BIN:-} ]] || CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o bin/edgegw ./cmd/edgegw
}

# upstream_conf: the cloud broker's configuration, Debian mosquitto's
# defaults (one listener, anonymous access; a QoS 2 quota of 20 per
# client, 1000 messages queued for a subscriber).
upstream_conf() {
  cat >"$work/upstream.conf" <<CONF
listener $PORT_UP 127.0.0.1
allow_anonymous true
CONF
}

wait_port() { # port: until it accepts, at most 5 s
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "nothing listens on port $1" >&2; return 1
}

# start_run LOG GATEWAY...: a fresh cloud broker, then the gateway (the
# command GATEWAY..., its stderr to LOG), each once it listens.
start_run() {
  local log=$1; shift
  "$MOSQUITTO" -c "$work/upstream.conf" 2>>"$work/upstream.log" &
  pids+=("$!")
  wait_port "$PORT_UP"
  "$@" 2>>"$log" &
  pids+=("$!")
  wait_port "$PORT_GW"
}

# stop_run: the gateway and the cloud broker.
stop_run() {
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
}

# gen_result: the generator's JSON result ($work/out.json), or an error.
gen_result() {
  local out
  out=$(cat "$work/out.json")
  [[ -n $out ]] || out='{"error":"generator printed nothing"}'
  printf '%s' "$out"
}
