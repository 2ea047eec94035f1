#!/usr/bin/env bash
# Lanes benchmark (issue 17): after an outage that left 100,000 `bulk`
# messages in the bridge's spool, the uplink comes back while a sensor
# keeps publishing and an alarm (`high`) fires mid-drain. edgegw's bridge
# with `drain: fifo` and with `drain: live-first` (backlog_share 25%),
# same link, same upstream, same generator, in one run. See
# bench/README.md ("Lanes"). Knobs (environment):
#   LANES_SCENARIOS  "bulk-lane normal-lane" (default): the live sensor's
#                    topic in the backlog's lane, or in `normal`
#   LANES_MODES      "fifo live-first" (default)
#   LANES_COUNT      backlog messages (default 100000)
#   LANES_RATE       live msg/s (default 20)
#   LANES_LIVE_QOS   the live sensor's QoS (default 2)
#   LANES_RTT        the link's round trip (default 50ms)
#   LANES_LINK_RATE  the link's bytes/s each way (default 250000: 2 Mbit/s; 0 = unlimited)
#   LANES_DURATION   longest drain per run before giving up (default 150s)
#   MOSQUITTO        mosquitto binary (default /usr/sbin/mosquitto)
#   EDGEGW_BIN       an edgegw binary to measure instead of building one
set -euo pipefail
cd "$(dirname "$0")/.."

SCENARIOS=${LANES_SCENARIOS:-"bulk-lane normal-lane"}
MODES=${LANES_MODES:-"fifo live-first"}
COUNT=${LANES_COUNT:-100000}
RATE=${LANES_RATE:-20}
LIVE_QOS=${LANES_LIVE_QOS:-2}
RTT=${LANES_RTT:-50ms}
LINK_RATE=${LANES_LINK_RATE:-250000}
DURATION=${LANES_DURATION:-150s}
MOSQUITTO=${MOSQUITTO:-/usr/sbin/mosquitto}
PORT_UP=${LANES_PORT_UPSTREAM:-28881}   # the cloud broker
PORT_GW=${LANES_PORT_GATEWAY:-28882}    # the gateway's local listener
PORT_LINK=${LANES_PORT_LINK:-28883}     # the slow link (the generator's proxy)
PORT_METRICS=${LANES_PORT_METRICS:-28884} # edgegw's /ledger
GO=${GO:-go}

# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_init lanes
bench_build lanesreport
# The cloud broker: QoS 2 quota 20 per client.
upstream_conf

# edgegw as the gateway: its defaults (max_inflight auto, a durable spool
# with sync batch), a persistent upstream session, three lanes: the alarm
# high, the backlog's topics bulk, everything else normal (the first
# matching rule maps a message). QoS 2 rules: each message keeps its QoS.
edgegw_conf() { # drain lines
  cat <<CONF
log: {level: warn}
listeners:
  - {name: lan, type: tcp, address: "127.0.0.1:$PORT_GW"}
metrics: {address: "127.0.0.1:$PORT_METRICS"}
persistence: {dir: "$work/state"}
bridges:
  - name: cloud
    addresses: ["tcp://127.0.0.1:$PORT_LINK"]
    client_id: gw-lanes
    clean_session: false
    reconnect_min: 1s
    reconnect_max: 1s
$1
    topics:
      - {pattern: "bench/+/lanes/alarm", direction: out, qos: 2, priority: high}
      - {pattern: "bench/+/lanes/bulk/#", direction: out, qos: 2, priority: bulk}
      - {pattern: "bench/#", direction: out, qos: 2}
CONF
}
edgegw_conf "    drain: fifo" >"$work/fifo.yaml"
edgegw_conf "    drain: live-first
    backlog_share: 25%" >"$work/live-first.yaml"

scenario_args() { # scenario -> generator arguments
  case "$1" in
    bulk-lane)   echo "--live-lane bulk" ;;
    normal-lane) echo "--live-lane normal" ;;
    *) echo "unknown scenario $1" >&2; return 1 ;;
  esac
}

echo "== run: scenarios: $SCENARIOS; modes: $MODES; backlog $COUNT, live $RATE msg/s, link $RTT $LINK_RATE B/s"
for sc in $SCENARIOS; do
  args=$(scenario_args "$sc")
  for mode in $MODES; do
    rm -rf "$work/state"
    start_run "$work/$mode.log" "$EDGEGW" --config "$work/$mode.yaml"
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    status=0
    # The backlog: QoS 1 with every 100th message QoS 2; the live sensor
    # at QoS 2 (duplicates of either are counted).
    # shellcheck disable=SC2086
    bin/edgegw-bench lanes $args --addr "127.0.0.1:$PORT_GW" --upstream "127.0.0.1:$PORT_UP" \
      --proxy "127.0.0.1:$PORT_LINK" --count "$COUNT" --qos 1 --qos2-every 100 --live-qos "$LIVE_QOS" \
      --rate "$RATE" --rtt "$RTT" --link-rate "$LINK_RATE" --window 100 --duration "$DURATION" \
      --json >"$work/out.json" 2>"$work/gen.err" || status=$?
    # Where every message went, by the bridge's ledger (the link is gone
    # with the generator: what was in flight may still count as such).
    ledger=$(curl -s --max-time 5 "http://127.0.0.1:$PORT_METRICS/ledger?format=json" || true)
    [[ -n $ledger ]] || ledger='{}'
    stop_run
    printf '{"scenario":"%s","mode":"%s","load":"%s","exit":%d,"ledger":%s,"gen":%s}\n' "$sc" "$mode" "$load" "$status" "$ledger" "$(gen_result)" >>"$raw"
    bin/lanes-report -line <<<"$(tail -n1 "$raw")"
  done
done

cp "$raw" "$results/lanes-raw-$stamp.jsonl"
title="edgegw lanes benchmark $stamp ($(nproc) cores, load at the end $(cut -d' ' -f1-3 /proc/loadavg))"
bin/lanes-report -in "$raw" -md "$results/lanes-$stamp.md" -png "$results/lanes-$stamp.png" -png-name "lanes-$stamp.png" -title "$title"
bin/lanes-report -in "$raw" -md "$results/lanes-latest.md" -png "$results/lanes-latest.png" -png-name lanes-latest.png -title "$title"
echo
cat "$results/lanes-latest.md"
