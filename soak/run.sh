#!/usr/bin/env bash
# Soak: field report 002 against the real binary. Starts bin/edgegw on free
# loopback ports, drives `edgegw-bench slowsub` for the load duration,
# samples RSS and /metrics every second through the baseline, the load and
# the drain (sessions.max_expiry + slack), then writes
# soak/results/<date>.csv, latest.csv, latest.png, latest.md and judges the
# run (soak-chart's exit status). See soak/README.md. Knobs (environment):
#   SOAK_DURATION    load duration per broker, s/m/h (default 10m; DURATION also works)
#   SOAK_BROKERS     "edgegw" (default) or "edgegw mosquitto" (mosquitto: RSS only)
#   SOAK_EXPIRY      edgegw sessions.max_expiry (default 30s)
#   SOAK_SLACK       sampling after the load beyond SOAK_EXPIRY (default 15s)
#   SOAK_BASELINE    sampling before the load (default 5s)
#   SOAK_PROBE       1 (default, needs mosquitto_sub): after the load, leave one idle
#                    persistent session that must expire within the drain
#   SOAK_BUILD       1 (default) builds bin/edgegw, bin/edgegw-bench, bin/soak-chart; 0 uses them as they are
#   MOSQUITTO        mosquitto binary (default /usr/sbin/mosquitto)
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${SOAK_DURATION:-${DURATION:-10m}}
BROKERS=${SOAK_BROKERS:-edgegw}
EXPIRY=${SOAK_EXPIRY:-30s}
SLACK=${SOAK_SLACK:-15s}
BASELINE=${SOAK_BASELINE:-5s}
BUILD=${SOAK_BUILD:-1}
PROBE=${SOAK_PROBE:-1}
MOSQUITTO=${MOSQUITTO:-/usr/sbin/mosquitto}
GO=${GO:-go}

# The limits (edgegw's defaults, as in bench/run.sh).
MAX_INFLIGHT=32
MAX_QUEUED=1000
MAX_QUEUED_BYTES=4194304   # 4 MiB per session
MEMORY_BUDGET=67108864     # 64 MiB for all queued payloads
MSG_SIZE=4096              # slowsub's payload

secs() { # Go-style duration made of whole h/m/s parts -> seconds
  local d=$1 t=0
  while [[ $d =~ ^([0-9]+)(h|m|s)(.*)$ ]]; do
    case ${BASH_REMATCH[2]} in
      h) t=$((t + BASH_REMATCH[1] * 3600)) ;;
      m) t=$((t + BASH_REMATCH[1] * 60)) ;;
      s) t=$((t + BASH_REMATCH[1])) ;;
    esac
    d=${BASH_REMATCH[3]}
  done
  if [[ -n $d || $t -le 0 ]]; then echo "soak: bad duration '$1' (want e.g. 90s, 10m, 1h30m)" >&2; return 1; fi
  echo "$t"
}
dur_s=$(secs "$DUR"); expiry_s=$(secs "$EXPIRY"); slack_s=$(secs "$SLACK"); base_s=$(secs "$BASELINE")
drain_s=$((expiry_s + slack_s))
for b in $BROKERS; do
  case $b in
    edgegw) ;;
    mosquitto) [[ -x $MOSQUITTO ]] || { echo "soak: $MOSQUITTO not found (apt-get install mosquitto, or drop it from SOAK_BROKERS)" >&2; exit 2; } ;;
    *) echo "soak: unknown broker '$b' (edgegw, mosquitto)" >&2; exit 2 ;;
  esac
done
command -v curl >/dev/null || { echo "soak: curl is needed to scrape /metrics" >&2; exit 2; }

stamp=$(date +%Y-%m-%d-%H%M%S)
results=soak/results
mkdir -p bin "$results"
work=$(mktemp -d /tmp/edgegw-soak.XXXXXX)
csv="$work/soak.csv"
broker_pid=""
gen_pid=""

cleanup() {
  [[ -n $gen_pid ]] && kill "$gen_pid" 2>/dev/null || true
  [[ -n $broker_pid ]] && kill "$broker_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ $BUILD == 1 ]]; then
  echo "== build"
  $GO build -o bin/edgegw ./cmd/edgegw
  $GO build -o bin/edgegw-bench ./cmd/edgegw-bench
  $GO build -o bin/soak-chart ./soak/chart
fi
for f in bin/edgegw bin/edgegw-bench bin/soak-chart; do
  [[ -x $f ]] || { echo "soak: $f missing (run with SOAK_BUILD=1)" >&2; exit 2; }
done

free_port() { # a loopback TCP port nobody listens on (the broker's bind is the real test)
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    if command -v ss >/dev/null; then
      ss -Htln "sport = :$p" | grep -q . && continue
    fi
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    echo "$p"; return 0
  done
  echo "soak: no free port found" >&2; return 1
}

accepts() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

rss() { awk '/^VmRSS:/ { printf "%d", $2 * 1024 }' "/proc/$1/status" 2>/dev/null || true; }

# metrics_fields PORT: the CSV fields after rss_bytes, empty when the scrape fails.
metrics_fields() {
  curl -fsS --max-time 0.8 "http://127.0.0.1:$1/metrics" 2>/dev/null | awk '
    /^#/ { next }
    { v[$1] = $NF }
    function f(k) { return (k in v) ? sprintf("%.0f", v[k]) : "" }
    END {
      printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
        f("go_memstats_heap_inuse_bytes"), f("edgegw_queued_bytes"), f("edgegw_queued_messages"),
        f("edgegw_inflight_messages"), f("edgegw_sessions{state=\"connected\"}"),
        f("edgegw_sessions{state=\"disconnected\"}"), f("edgegw_connections"),
        f("edgegw_messages_dropped_total{reason=\"queue_full\"}"),
        f("edgegw_messages_dropped_total{reason=\"memory_budget\"}"),
        f("edgegw_messages_dropped_total{reason=\"expired\"}"),
        f("edgegw_messages_dropped_total{reason=\"too_large\"}"),
        f("edgegw_sessions_expired_total"), f("edgegw_session_takeovers_total"),
        f("edgegw_messages_received_total"), f("edgegw_messages_sent_total")
    }' || true
}
empty_metrics=",,,,,,,,,,,,,,"

start_edgegw() { # -> broker_pid, port, mport
  for attempt in 1 2 3; do
    port=$(free_port); mport=$(free_port)
    [[ $port == "$mport" ]] && continue
    cat >"$work/edgegw.yaml" <<CONF
log:
  level: warn
listeners:
  - name: soak
    type: tcp
    address: "127.0.0.1:$port"
limits:
  max_inflight: $MAX_INFLIGHT
  max_queued_messages: $MAX_QUEUED
  max_queued_bytes: $MAX_QUEUED_BYTES
  memory_budget: $MEMORY_BUDGET
sessions:
  max_expiry: ${expiry_s}s
persistence:
  dir: ""
metrics:
  address: "127.0.0.1:$mport"
CONF
    bin/edgegw --config "$work/edgegw.yaml" 2>>"$work/edgegw.log" &
    broker_pid=$!
    for _ in $(seq 100); do # at most 5 s
      kill -0 "$broker_pid" 2>/dev/null || break
      if accepts "$port" && curl -fsS --max-time 0.5 "http://127.0.0.1:$mport/healthz" >/dev/null 2>&1; then
        return 0
      fi
      sleep 0.05
    done
    kill "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; broker_pid=""
    echo "   edgegw did not come up on 127.0.0.1:$port / :$mport (attempt $attempt):" >&2
    tail -n 3 "$work/edgegw.log" | sed 's/^/   /' >&2
  done
  return 1
}

start_mosquitto() { # -> broker_pid, port
  for attempt in 1 2 3; do
    port=$(free_port)
    cat >"$work/mosquitto.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous true
persistence false
max_inflight_messages $MAX_INFLIGHT
max_queued_messages $MAX_QUEUED
max_queued_bytes $MAX_QUEUED_BYTES
max_connections -1
set_tcp_nodelay true
log_dest stderr
log_type error
log_type warning
CONF
    "$MOSQUITTO" -c "$work/mosquitto.conf" 2>>"$work/mosquitto.log" &
    broker_pid=$!
    for _ in $(seq 100); do
      kill -0 "$broker_pid" 2>/dev/null || break
      accepts "$port" && return 0
      sleep 0.05
    done
    kill "$broker_pid" 2>/dev/null || true; wait "$broker_pid" 2>/dev/null || true; broker_pid=""
    echo "   mosquitto did not come up on 127.0.0.1:$port (attempt $attempt)" >&2
  done
  return 1
}

stop_broker() {
  [[ -n $broker_pid ]] || return 0
  kill "$broker_pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$broker_pid" 2>/dev/null || true
  wait "$broker_pid" 2>/dev/null || true
  broker_pid=""
}

now_us() { echo "${EPOCHREALTIME/./}"; }

# sample BROKER T0_US PHASE: one CSV row.
sample() {
  local t_us r m=""
  t_us=$(( $(now_us) - $2 ))
  r=$(rss "$broker_pid")
  if [[ $1 == edgegw ]]; then
    m=$(metrics_fields "$mport"); [[ -n $m ]] || m=$empty_metrics
  else
    m=$empty_metrics
  fi
  printf '%s,%d.%01d,%s,%s,%s\n' "$1" $((t_us / 1000000)) $(( (t_us % 1000000) / 100000 )) "$3" "$r" "$m" >>"$csv"
  LAST_RSS=$r
}

# tick T0_US N: sleep until N seconds after T0.
tick() {
  local left=$(( $1 + $2 * 1000000 - $(now_us) ))
  (( left > 0 )) && sleep "$(printf '%d.%06d' $((left / 1000000)) $((left % 1000000)))"
  return 0
}

echo "broker,t_s,phase,rss_bytes,heap_inuse_bytes,queued_bytes,queued_messages,inflight_messages,sessions_connected,sessions_disconnected,connections,drops_queue_full,drops_memory_budget,drops_expired,drops_too_large,sessions_expired_total,takeovers_total,received_total,sent_total" >"$csv"

gen_flags=()
probe_flags=()
if [[ $PROBE == 1 ]] && ! command -v mosquitto_sub >/dev/null; then
  echo "   (no mosquitto_sub: no expiry probe; apt-get install mosquitto-clients)"; PROBE=0
fi
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "== soak: load $DUR per broker, baseline ${base_s}s, drain ${drain_s}s (max_expiry ${expiry_s}s + ${slack_s}s); brokers: $BROKERS"
for b in $BROKERS; do
  "start_$b" || { echo "soak: could not start $b" >&2; exit 1; }
  echo "-- $b pid $broker_pid on 127.0.0.1:$port$([[ $b == edgegw ]] && echo ", metrics :$mport")"
  t0=$(now_us); n=0
  while (( n < base_s )); do sample "$b" "$t0" baseline; n=$((n + 1)); tick "$t0" "$n"; done
  # The generator bounds itself (duration + 60 s); timeout is a second fence.
  timeout --kill-after=5 $((dur_s + 90)) bin/edgegw-bench slowsub --addr "127.0.0.1:$port" --duration "${dur_s}s" --json \
    >"$work/gen-$b.json" 2>"$work/gen-$b.err" &
  gen_pid=$!
  load_from=$n
  while kill -0 "$gen_pid" 2>/dev/null; do
    sample "$b" "$t0" load; n=$((n + 1)); tick "$t0" "$n"
    if (( (n - load_from) % 30 == 0 )); then
      printf '   t=%4ds load   RSS %6.1f MiB\n' "$n" "$(awk -v r="${LAST_RSS:-0}" 'BEGIN{print r/1048576}')"
    fi
  done
  gen_status=0; wait "$gen_pid" || gen_status=$?; gen_pid=""
  echo "   generator exit $gen_status: $(head -c 300 "$work/gen-$b.json")"
  [[ -s $work/gen-$b.err ]] && sed 's/^/   gen: /' "$work/gen-$b.err" | head -5
  if [[ $b == edgegw && $PROBE == 1 ]]; then
    # slowsub's last subscriber connection may be a clean one, which leaves
    # nothing to expire; this idle persistent session must expire.
    if timeout 10 mosquitto_sub -h 127.0.0.1 -p "$port" -V mqttv311 -c -i "soak-expiry-probe-$stamp" \
        -q 1 -t "soak/expiry-probe" -E >/dev/null 2>"$work/probe.err"; then
      probe_flags=(-expect-expired 1)
      echo "   expiry probe: persistent session soak-expiry-probe-$stamp left idle"
    else
      echo "   expiry probe failed: $(head -c 200 "$work/probe.err")" >&2
    fi
  fi
  drain_to=$((n + drain_s))
  while (( n < drain_to )); do
    sample "$b" "$t0" drain; n=$((n + 1)); tick "$t0" "$n"
    if (( (drain_to - n) % 15 == 0 )); then
      printf '   t=%4ds drain  RSS %6.1f MiB\n' "$n" "$(awk -v r="${LAST_RSS:-0}" 'BEGIN{print r/1048576}')"
    fi
  done
  sample "$b" "$t0" end
  if ! kill -0 "$broker_pid" 2>/dev/null; then
    echo "   $b exited during the run:" >&2; tail -n 20 "$work/$b.log" | sed 's/^/   /' >&2
  fi
  stop_broker
  gen_flags+=(-gen "$b=$work/gen-$b.json")
done

cp "$csv" "$results/$stamp.csv"
cp "$csv" "$results/latest.csv"
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- cmd gateway listeners internal 2>/dev/null || rev="$rev+dirty"
status=0
bin/soak-chart -csv "$results/latest.csv" -png "$results/latest.png" -md "$results/latest.md" \
  -budget $MEMORY_BUDGET -max-queued-bytes $MAX_QUEUED_BYTES -max-queued-messages $MAX_QUEUED \
  -max-inflight $MAX_INFLIGHT -msg-size $MSG_SIZE -duration "$DUR" -expiry "${expiry_s}s" \
  -title "edgegw soak $stamp ($rev): field report 002" "${gen_flags[@]}" "${probe_flags[@]}" || status=$?
cp "$results/latest.md" "$results/$stamp.md"
{
  echo
  echo "Run: \`make soak DURATION=$DUR$([[ $BROKERS != edgegw ]] && echo " SOAK_BROKERS=\"$BROKERS\"")\` on $(nproc) cores, load average at the end $(cut -d' ' -f1-3 /proc/loadavg). Samples: $stamp.csv."
} | tee -a "$results/latest.md" >>"$results/$stamp.md"
echo "   wrote $results/$stamp.csv, latest.csv, latest.png, latest.md"
exit "$status"
