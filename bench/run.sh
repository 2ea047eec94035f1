#!/usr/bin/env bash
# Side-by-side benchmark: edgegw vs mosquitto, same machine, same generator,
# same run. See bench/README.md. Knobs (environment):
#   BENCH_DURATION   per scenario and broker (default 10s)
#   BENCH_SCENARIOS  space-separated subset (default: all, see below)
#   BENCH_BROKERS    "edgegw mosquitto" (default); for sensors and
#                    sensors-local also gofloor, gofloor-epoll (the Go
#                    floor, bench/gofloor; bench/floor.sh runs them)
#   BENCH_RESULTS    where the table and raw results go (default bench/results)
#   BENCH_IDLE_CONNS idle connections (default 5000)
#   BENCH_SENSORS_DURATION  the sensor-fleet scenario's publishing time (default 20s)
#   MOSQUITTO        mosquitto binary (default /usr/sbin/mosquitto)
#   EDGEGW_BIN       an edgegw binary to measure instead of building one
#                    (paired runs of two builds: see bench/README.md)
#   EDGEGW_LABEL     its name in the results (default edgegw; bench/ab.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${BENCH_DURATION:-10s}
IDLE_CONNS=${BENCH_IDLE_CONNS:-5000}
SCENARIOS=${BENCH_SCENARIOS:-"fanin-q0 fanin-q1 fanin-q1-w64 fanin-q2 fanin-q2-w64 fanout-q0 fanout-q1 latency-q0 latency-q1 idle slowsub bidir-qos2 sensors sensors-local"}
BROKERS=${BENCH_BROKERS:-"edgegw mosquitto"}
MOSQUITTO=${MOSQUITTO:-/usr/sbin/mosquitto}
PORT_EDGEGW=${BENCH_PORT_EDGEGW:-18831}
PORT_MOSQUITTO=${BENCH_PORT_MOSQUITTO:-18830}
PORT_UPSTREAM=${BENCH_PORT_UPSTREAM:-18832}  # sensors: the "cloud" both gateways bridge to
SENSORS_DUR=${BENCH_SENSORS_DURATION:-20s}
GO=${GO:-go}

# The limits both brokers get (edgegw's defaults).
MAX_INFLIGHT=32
MAX_QUEUED=1000
MAX_QUEUED_BYTES=4194304   # 4 MiB
MEMORY_BUDGET=67108864     # 64 MiB (edgegw only; mosquitto has no equivalent for queued payloads)
MAX_CONNECTIONS=12000

CLK_TCK=$(getconf CLK_TCK)
stamp=$(date +%Y-%m-%d-%H%M%S)
results=${BENCH_RESULTS:-bench/results}
mkdir -p bin "$results"
work=$(mktemp -d /tmp/edgegw-bench.XXXXXX)
raw="$work/raw.jsonl"
broker_pid=""
sampler_pid=""
upstream_pid=""

cleanup() {
  [[ -n "$sampler_pid" ]] && kill "$sampler_pid" 2>/dev/null || true
  [[ -n "$broker_pid" ]] && kill "$broker_pid" 2>/dev/null || true
  [[ -n "$upstream_pid" ]] && kill "$upstream_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== build"
$GO build -o bin/edgegw-bench ./cmd/edgegw-bench
$GO build -o bin/bench-report ./bench/report
if [[ " $BROKERS " == *" gofloor"* ]]; then
  for sc in $SCENARIOS; do
    [[ $sc == sensors || $sc == sensors-local ]] || { echo "the Go floor runs sensors and sensors-local only, not $sc" >&2; exit 2; }
  done
  CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' -o bin/bench-gofloor ./bench/gofloor
fi
edgegw_label=edgegw
# edgegw is built the way it ships (Makefile `build`, scripts/build-dist.sh):
# static, no cgo. A cgo build maps libc and its own threads: ~1.5 MiB more
# RSS than the binary the .deb installs.
ship_build() { CGO_ENABLED=0 $GO build -trimpath -ldflags '-s -w' "$@"; }
EDGEGW=bin/edgegw
if [[ -n ${EDGEGW_BIN:-} ]]; then
  EDGEGW=$EDGEGW_BIN
  echo "   edgegw: $EDGEGW (EDGEGW_BIN, not built)"
elif ! ship_build -o bin/edgegw ./cmd/edgegw 2>"$work/build.log"; then
  echo "   cmd/edgegw does not build (see below); using the in-process core stand-in bench/gatewayd"
  sed 's/^/   /' "$work/build.log" | head -5
  ship_build -o bin/bench-gatewayd ./bench/gatewayd
  edgegw_label=edgegw-core
fi

cat >"$work/mosquitto.conf" <<CONF
listener $PORT_MOSQUITTO 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages $MAX_INFLIGHT
max_queued_messages $MAX_QUEUED
max_queued_bytes $MAX_QUEUED_BYTES
max_packet_size 1048576
max_connections -1
set_tcp_nodelay true
log_dest stderr
log_type error
log_type warning
CONF

cat >"$work/edgegw.yaml" <<CONF
log:
  level: warn
listeners:
  - name: bench
    type: tcp
    address: "127.0.0.1:$PORT_EDGEGW"
limits:
  max_connections: $MAX_CONNECTIONS
  max_inflight: $MAX_INFLIGHT
  max_queued_messages: $MAX_QUEUED
  max_queued_bytes: $MAX_QUEUED_BYTES
  memory_budget: $MEMORY_BUDGET
metrics:
  address: ""  # no HTTP endpoint: two benchmark runs side by side would fight over its port
CONF

# The sensor-fleet scenario: each gateway bridges "sensors/#" at QoS 1 to
# an upstream mosquitto (the cloud), with its queue for the uplink kept:
# edgegw's spool on disk (persistence.dir, sync: batch, the default);
# mosquitto as the gateway with a `connection` section and persistence on
# (mosquitto writes its persistence file at autosave and exit, so its
# bridge queue is in memory meanwhile). Both on the same disk (not tmpfs).
spool="$work/spool"; mosq_state="$work/mosquitto-state"
mkdir -p "$spool" "$mosq_state"
# mosquitto started as root runs as the mosquitto user: its files must be writable.
id mosquitto >/dev/null 2>&1 && chown mosquitto "$mosq_state" || chmod 1777 "$mosq_state"

cp "$work/mosquitto.conf" "$work/mosquitto-sensors.conf"
cat >>"$work/mosquitto-sensors.conf" <<CONF
persistence true
persistence_location $mosq_state/
connection cloud
address 127.0.0.1:$PORT_UPSTREAM
topic sensors/# out 1
cleansession false
CONF
sed -i 's/^persistence false$//' "$work/mosquitto-sensors.conf"

cp "$work/edgegw.yaml" "$work/edgegw-sensors.yaml"
cat >>"$work/edgegw-sensors.yaml" <<CONF
persistence:
  dir: "$spool"
  sync: batch
bridges:
  - name: cloud
    addresses: ["tcp://127.0.0.1:$PORT_UPSTREAM"]
    max_inflight: $MAX_INFLIGHT
    topics:
      - pattern: "sensors/#"
        direction: out
        qos: 1
CONF

cat >"$work/upstream.conf" <<CONF
listener $PORT_UPSTREAM 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages $MAX_INFLIGHT
max_queued_messages 100000
set_tcp_nodelay true
log_dest stderr
log_type error
CONF

# cpu_us PID: user+system CPU time of PID in µs.
cpu_us() { awk -v t="$CLK_TCK" '{ printf "%d", ($14 + $15) * 1000000 / t }' "/proc/$1/stat"; }
# vcsw PID: voluntary context switches of all of PID's threads: how often
# it went to sleep and was woken (wakeups).
vcsw() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches:/ { s += $2 } END { printf "%d", s }'; }
now_us() { date +%s%6N; }
# rss PID: resident set size in bytes.
rss() { awk '/^VmRSS:/ { printf "%d", $2 * 1024 }' "/proc/$1/status"; }

# wait_port
# shellcheck source=bench/lib.sh
. bench/lib.sh

start_broker() { # name [config suffix] -> sets broker_pid, port
  ulimit -n "$(ulimit -Hn)"
  local sfx=${2:-}
  case "$1" in
    mosquitto)
      "$MOSQUITTO" -c "$work/mosquitto$sfx.conf" 2>>"$work/mosquitto.log" &
      broker_pid=$!; port=$PORT_MOSQUITTO ;;
    gofloor | gofloor-epoll)
      # One processor, as edgegw's procs governor gives itself at these
      # rates (its figure with two was higher).
      local up=(); [[ -n $sfx ]] && up=(-upstream "127.0.0.1:$PORT_UPSTREAM")
      local mode=(); [[ $1 == gofloor-epoll ]] && mode=(-epoll)
      GOMAXPROCS=1 bin/bench-gofloor -addr "127.0.0.1:$PORT_EDGEGW" "${up[@]}" "${mode[@]}" 2>>"$work/gofloor.log" &
      broker_pid=$!; port=$PORT_EDGEGW ;;
    edgegw)
      if [[ $edgegw_label == edgegw ]]; then
        "$EDGEGW" --config "$work/edgegw$sfx.yaml" 2>>"$work/edgegw.log" &
      else
        bin/bench-gatewayd --addr "127.0.0.1:$PORT_EDGEGW" --max-connections $MAX_CONNECTIONS \
          --max-inflight $MAX_INFLIGHT --max-queued-messages $MAX_QUEUED \
          --max-queued-bytes $MAX_QUEUED_BYTES --memory-budget $MEMORY_BUDGET 2>>"$work/edgegw.log" &
      fi
      broker_pid=$!; port=$PORT_EDGEGW ;;
  esac
  wait_port "$port"
  sleep 0.3 # let the process settle before the baseline sample
}

stop_broker() {
  kill "$broker_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$broker_pid" 2>/dev/null || true
  wait "$broker_pid" 2>/dev/null || true
  broker_pid=""
}

gen_args() { # scenario -> generator arguments
  case "$1" in
    fanin-q0)   echo "fanin --qos 0 --duration $DUR" ;;
    fanin-q1)   echo "fanin --qos 1 --window 20 --duration $DUR" ;;
    fanin-q1-w64) echo "fanin --qos 1 --window 64 --duration $DUR" ;;
    fanin-q2)   echo "fanin --qos 2 --window 20 --duration $DUR" ;;
    fanin-q2-w64) echo "fanin --qos 2 --window 64 --duration $DUR" ;;
    fanout-q0)  echo "fanout --qos 0 --duration $DUR" ;;
    fanout-q1)  echo "fanout --qos 1 --duration $DUR" ;;
    latency-q0) echo "latency --qos 0 --rate 2000 --duration $DUR" ;;
    latency-q1) echo "latency --qos 1 --rate 2000 --duration $DUR" ;;
    idle)       echo "idle --conns $IDLE_CONNS --duration 3s --ready-file $work/ready" ;;
    slowsub)    echo "slowsub --duration $DUR" ;;
    bidir-qos2) echo "bidir-qos2 --version 5 --count 2000 --duration 30s" ;;
    sensors)    echo "sensors --conns 1000 --interval 2s --qos 1 --size 100 --duration $SENSORS_DUR --upstream 127.0.0.1:$PORT_UPSTREAM --handshake $work/hs" ;;
    # The same fleet without a bridge: what the broker itself costs.
    sensors-local) echo "sensors --conns 1000 --interval 2s --qos 1 --size 100 --duration $SENSORS_DUR --handshake $work/hs" ;;
    *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

echo "== run: duration $DUR, brokers: $BROKERS, scenarios: $SCENARIOS"
for sc in $SCENARIOS; do
  args=$(gen_args "$sc")
  for b in $BROKERS; do
    sfx=""
    if [[ $sc == sensors ]]; then
      # A fresh upstream and empty spools for every broker.
      rm -rf "${spool:?}"/* "${mosq_state:?}"/*
      "$MOSQUITTO" -c "$work/upstream.conf" 2>>"$work/upstream.log" &
      upstream_pid=$!
      wait_port "$PORT_UPSTREAM"
      sfx=-sensors
    fi
    start_broker "$b" "$sfx"
    label=$b; [[ $b == edgegw ]] && label=${EDGEGW_LABEL:-$edgegw_label}
    rss0=$(rss "$broker_pid"); cpu0=$(cpu_us "$broker_pid"); rss_ready=0
    vcsw0=$(vcsw "$broker_pid"); t0=$(now_us)
    rm -f "$work/ready" "$work/peak" "$work/hs.ready" "$work/hs.done"
    if [[ $sc == slowsub ]]; then # peak RSS, sampled every 100 ms
      ( peak=0; while kill -0 "$broker_pid" 2>/dev/null; do
          r=$(rss "$broker_pid" 2>/dev/null || echo 0); (( r > peak )) && peak=$r && echo "$peak" >"$work/peak"
          sleep 0.1; done ) &
      sampler_pid=$!
    fi
    # shellcheck disable=SC2086
    bin/edgegw-bench $args --addr "127.0.0.1:$port" --json >"$work/out.json" 2>"$work/gen.err" &
    gen=$!
    if [[ $sc == idle ]]; then
      for _ in $(seq 1200); do [[ -f $work/ready ]] && break; kill -0 $gen 2>/dev/null || break; sleep 0.05; done
      sleep 1 # let per-connection buffers go idle
      rss_ready=$(rss "$broker_pid")
    fi
    if [[ $sc == sensors* ]]; then
      # Sample only the steady part: between the generator's handshakes
      # (all sensors connected .. everything delivered), not the setup of
      # 1,000 connections or their teardown.
      cpu1=$cpu0; vcsw1=$vcsw0; t1=$t0
      wait_file() { for _ in $(seq 6000); do [[ -f $1 ]] && return 0; kill -0 $gen 2>/dev/null || return 1; sleep 0.02; done; return 1; }
      if wait_file "$work/hs.ready"; then
        cpu0=$(cpu_us "$broker_pid"); vcsw0=$(vcsw "$broker_pid"); t0=$(now_us); rss0=$(rss "$broker_pid")
        rm -f "$work/hs.ready"
      fi
      if wait_file "$work/hs.done"; then
        cpu1=$(cpu_us "$broker_pid"); vcsw1=$(vcsw "$broker_pid"); t1=$(now_us); rss_ready=$(rss "$broker_pid")
        rm -f "$work/hs.done"
      fi
    fi
    status=0; wait $gen || status=$?
    if [[ $sc != sensors* ]]; then
      cpu1=$(cpu_us "$broker_pid"); vcsw1=$(vcsw "$broker_pid"); t1=$(now_us)
    fi
    sleep 0.5
    rss_end=$(rss "$broker_pid")
    if [[ -n "$sampler_pid" ]]; then kill "$sampler_pid" 2>/dev/null || true; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=""; fi
    peak=$(cat "$work/peak" 2>/dev/null || echo "$rss_end")
    stop_broker
    if [[ -n $upstream_pid ]]; then kill "$upstream_pid" 2>/dev/null || true; wait "$upstream_pid" 2>/dev/null || true; upstream_pid=""; fi
    out=$(cat "$work/out.json"); [[ -n $out ]] || out='{"error":"generator printed nothing"}'
    printf '{"broker":"%s","scenario":"%s","exit":%d,"cpu_us":%d,"wall_us":%d,"vcsw":%d,"rss_before":%d,"rss_ready":%d,"rss_peak":%d,"rss_end":%d,"gen":%s}\n' \
      "$label" "$sc" "$status" $((cpu1 - cpu0)) $((t1 - t0)) $((vcsw1 - vcsw0)) "$rss0" "$rss_ready" "$peak" "$rss_end" "$out" >>"$raw"
    printf '   %-11s %-12s exit %d  %s\n' "$sc" "$label" "$status" \
      "$(bin/bench-report -line <<<"$(tail -n1 "$raw")")"
  done
done

cp "$raw" "$results/raw-$stamp.jsonl"
bin/bench-report -in "$raw" -md "$results/$stamp.md" -latest "$results/latest.md" -png "$results/latest.png" \
  -title "edgegw benchmark $stamp (BENCH_DURATION=$DUR, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)${EDGEGW_BIN:+, edgegw $EDGEGW_BIN})"
echo
cat "$results/latest.md"
