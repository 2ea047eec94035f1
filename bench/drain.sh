#!/usr/bin/env bash
# Drain benchmark (issue 20): after an outage, how fast does a gateway's
# bridge empty its backlog into a cloud broker over a slow link, and what
# latency do live readings see meanwhile? edgegw's bridge and mosquitto's
# own bridge, same link, same upstream, same generator, in one run.
# See bench/README.md ("Drain"). Knobs (environment):
#   DRAIN_SCENARIOS  space-separated subset (default: all, see scenario_args)
#   DRAIN_GATEWAYS   "edgegw edgegw-w32 mosquitto" (default)
#   MOSQUITTO        mosquitto binary (default /usr/sbin/mosquitto)
#   EDGEGW_BIN       an edgegw binary to measure instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

SCENARIOS=${DRAIN_SCENARIOS:-"q1-50ms q1-300ms q2-50ms q2-300ms mixed-50ms mixed-300ms q1-1mbit"}
GATEWAYS=${DRAIN_GATEWAYS:-"edgegw edgegw-w32 mosquitto"}
MOSQUITTO=${MOSQUITTO:-/usr/sbin/mosquitto}
PORT_UP=${DRAIN_PORT_UPSTREAM:-28871}   # the cloud broker
PORT_GW=${DRAIN_PORT_GATEWAY:-28872}    # the gateway's local listener
PORT_LINK=${DRAIN_PORT_LINK:-28873}     # the slow link (the generator's proxy)
GO=${GO:-go}

# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init drain
bench_build drainreport
# The cloud broker: QoS 2 quota 20 per client, 1000 queued.
upstream_conf

# edgegw as the gateway: its defaults (max_inflight auto, max_inflight_qos2
# 20, a durable spool with sync batch), a persistent upstream session.
edgegw_conf() { # max_inflight line
  cat <<CONF
log: {level: warn}
listeners:
  - {name: lan, type: tcp, address: "127.0.0.1:$PORT_GW"}
metrics: {address: ""}
persistence: {dir: "$work/state"}
bridges:
  - name: cloud
    addresses: ["tcp://127.0.0.1:$PORT_LINK"]
    client_id: gw-edgegw
    clean_session: false
    reconnect_min: 1s
    reconnect_max: 1s
$1
    topics:
      - {pattern: "bench/#", direction: out, qos: 2}
CONF
}
edgegw_conf "" >"$work/edgegw.yaml"
edgegw_conf "    max_inflight: 32" >"$work/edgegw-w32.yaml"

# mosquitto as the gateway: its bridge, a persistent upstream session,
# reconnect after 1 s, and room to queue the whole backlog (its default,
# max_queued_messages 1000, would drop the rest). Everything else default.
cat >"$work/gateway-mosquitto.conf" <<CONF
listener $PORT_GW 127.0.0.1
allow_anonymous true
max_queued_messages 1000000
connection cloud
address 127.0.0.1:$PORT_LINK
clientid gw-mosquitto
cleansession false
restart_timeout 1
topic bench/# out 2
CONF

scenario_args() { # scenario -> generator arguments
  case "$1" in
    q1-50ms)     echo "--qos 1 --count 20000 --rtt 50ms" ;;
    q1-300ms)    echo "--qos 1 --count 20000 --rtt 300ms" ;;
    # QoS 2 within a quota of 20 flows takes 2 round trips per 20 messages.
    q2-50ms)     echo "--qos 2 --count 2000 --rtt 50ms" ;;
    q2-300ms)    echo "--qos 2 --count 1000 --rtt 300ms" ;;
    mixed-50ms)  echo "--qos 1 --qos2-every 10 --count 5000 --rtt 50ms" ;;
    mixed-300ms) echo "--qos 1 --qos2-every 10 --count 2000 --rtt 300ms" ;;
    q1-1mbit)    echo "--qos 1 --count 5000 --rtt 50ms --link-rate 125000 --size 100" ;;
    *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

echo "== run: scenarios: $SCENARIOS; gateways: $GATEWAYS"
for sc in $SCENARIOS; do
  args=$(scenario_args "$sc")
  for gw in $GATEWAYS; do
    # A fixed window of 32 over 300 ms takes minutes: 50 ms shows it.
    [[ $gw == edgegw-w32 && $sc == *300ms ]] && continue
    [[ $gw == edgegw-w32 && $sc == q2-* ]] && continue # QoS 2 is 20 either way
    rm -rf "$work/state"
    case $gw in
      mosquitto) start_run "$work/gateway-mosquitto.log" "$MOSQUITTO" -c "$work/gateway-mosquitto.conf" ;;
      *) start_run "$work/$gw.log" "$EDGEGW" --config "$work/$gw.yaml" ;;
    esac
    status=0
    # shellcheck disable=SC2086
    bin/edgegw-bench drain $args --addr "127.0.0.1:$PORT_GW" --upstream "127.0.0.1:$PORT_UP" \
      --proxy "127.0.0.1:$PORT_LINK" --window 100 --rate 10 --duration 300s --json >"$work/out.json" 2>"$work/gen.err" || status=$?
    stop_run
    printf '{"gateway":"%s","scenario":"%s","exit":%d,"gen":%s}\n' "$gw" "$sc" "$status" "$(gen_result)" >>"$raw"
    bin/drain-report -line <<<"$(tail -n1 "$raw")"
  done
done

cp "$raw" "$results/drain-raw-$stamp.jsonl"
bin/drain-report -in "$raw" -md "$results/drain-$stamp.md" -latest "$results/drain-latest.md" \
  -title "edgegw drain benchmark $stamp ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)${EDGEGW_BIN:+, edgegw $EDGEGW_BIN})"
echo
cat "$results/drain-latest.md"
