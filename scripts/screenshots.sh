#!/bin/sh
# make screenshots: the status page in headless Debian chromium, while the
# uplink is up, down and back. Runs the real binaries on free 127.0.0.1
# ports: mosquitto as the cloud broker, edgegw with a TCP listener and a
# serial listener on a socat pty pair fed by `edgegw sensor`, a TCP
# publisher and a v5 subscriber. Writes docs/status-page-*.png and prints
# what status.json said in each state; fails if the page says what it
# should not (an alarm while the uplink keeps up, none while it is down, a
# dead serial sensor, a count with the wrong plural after the page's own
# refresh). Takes about 3 minutes (the charts sample every 10 s).
set -eu

GO=${GO:-go}
OUT=${OUT:-docs}
UP_FOR=${UP_FOR:-60}     # seconds of traffic before the outage
DOWN_FOR=${DOWN_FOR:-60} # seconds of outage
AFTER=${AFTER:-40}       # seconds after the uplink is back
SIZE=${SIZE:-360,2500}   # a narrow phone's CSS width, and the page's height

T=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT INT TERM

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitport() { # host port
	i=0
	until python3 -c "import socket,sys; socket.create_connection(('$1',$2),1)" 2>/dev/null; do
		i=$((i+1)); [ $i -lt 100 ] || { echo "port $2 never opened" >&2; exit 1; }; sleep 0.1
	done
}
json() { curl -fsS "http://127.0.0.1:$WEB/status.json"; }
facts() { # what the page's data said
	json | python3 -c '
import json,sys
d=json.load(sys.stdin); b=d["bridges"][0]
print("  bridge %s: %s since %s; last error: %s" % (b["name"], b["state"], b["since"], b["last_error_text"] or "none"))
print("  backlog %d messages (%d B), in %s/s, drained %s/s, time to empty %s s; sent %d acked %d" % (b["backlog_messages"], b["backlog_bytes"], b["in_per_second"], b["drain_per_second"], b["time_to_empty_seconds"], b["sent"], b["acked"]))
print("  clients: %s" % ", ".join(c["client_id"]+"@"+l["name"] for l in d["listeners"] for c in l["clients"]))
print("  backlog state: %s" % b["backlog_state"])
s=d["serial_links"][0]; print("  serial %s: %s, %d good frames, corrupt %s" % (s["device"], s["state"], s["frames_good"], s["frames_corrupt"]))'
}
expect() { # bridge-state backlog-state...: fail unless status.json says so
	json | python3 -c '
import json,sys
d=json.load(sys.stdin); b=d["bridges"][0]; s=d["serial_links"][0]
want_state, want_backlog = sys.argv[1], sys.argv[2:]
bad = []
if b["state"] != want_state: bad.append("bridge %s, want %s" % (b["state"], want_state))
if b["backlog_state"] not in want_backlog: bad.append("backlog %s, want one of %s" % (b["backlog_state"], want_backlog))
if s["state"] != "open" or s["frames_good"] == 0: bad.append("serial sensor: %s, %d good frames" % (s["state"], s["frames_good"]))
if bad: sys.exit("status.json: " + "; ".join(bad))' "$@"
}
shot() { # name
	chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
		--disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$T/chrome-$1" \
		--window-size="$SIZE" --screenshot="$OUT/status-page-$1.png" "http://127.0.0.1:$WEB/" 2>"$T/chromium.log" ||
		{ cat "$T/chromium.log" >&2; exit 1; }
	echo "wrote $OUT/status-page-$1.png"
}

LDFLAGS="-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo dev) -X main.commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
# The live refresh in a real browser: the page's script must have fetched
# status.json and updated the page (it clears the class of #fresh only
# then) within 12 s of virtual time.
check_refresh() {
	chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
		--disable-component-update --disable-sync --user-data-dir="$T/chrome-dom" \
		--virtual-time-budget=12000 --dump-dom "http://127.0.0.1:$WEB/" 2>"$T/chromium.log" >"$T/dom.html" ||
		{ cat "$T/chromium.log" >&2; exit 1; }
	grep -q 'id="fresh" class=""' "$T/dom.html" ||
		{ echo "live refresh: the page did not update itself from status.json" >&2; exit 1; }
	# What the script wrote agrees with what the server writes: a count
	# and its noun, the time to empty and its alarm.
	python3 - "$T/dom.html" <<'EOP'
import re, sys
dom = open(sys.argv[1]).read()
bad = []
pairs = re.findall(r'data-k="([^"]+)"[^>]*>(\d+)</\w+> (?:[a-z]+ )?<span data-k="([^"]+)" data-f="noun" data-n="(\w+)">(\w+)</span>', dom)
for k, n, k2, singular, word in pairs:
    want = singular if n == "1" else singular + "s"
    if k != k2 or word != want:
        bad.append("%s %s %s (want %s)" % (k, n, word, want))
for cls, text in re.findall(r'<span class="(eta[^"]*)" data-k="[^"]+" data-f="eta">([^<]*)<', dom):
    if ("alarm" in cls) != (text == "not draining"):
        bad.append("time to empty %r with class %r" % (text, cls))
if len(pairs) < 8 or bad:
    sys.exit("live refresh: %d counts with nouns; wrong: %s" % (len(pairs), bad))
print("live refresh: %d counts with their nouns, the time to empty and its alarm as the server writes them" % len(pairs))
EOP
}

$GO build -ldflags "$LDFLAGS" -o "$T/edgegw" ./cmd/edgegw
LAN=$(freeport); CLOUD=$(freeport); WEB=$(freeport)

cat >"$T/mosquitto.conf" <<EOC
listener $CLOUD 127.0.0.1
allow_anonymous true
EOC
start_cloud() {
	/usr/sbin/mosquitto -c "$T/mosquitto.conf" >"$T/mosquitto.log" 2>&1 &
	CLOUD_PID=$!; pids="$pids $CLOUD_PID"
	waitport 127.0.0.1 "$CLOUD"
}

# The serial line: edgegw opens one end, the simulated sensor the other.
socat PTY,link="$T/ttyGW",raw,echo=0 PTY,link="$T/ttySensor",raw,echo=0 &
pids="$pids $!"
i=0; until [ -e "$T/ttyGW" ] && [ -e "$T/ttySensor" ]; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1; done

cat >"$T/edgegw.yaml" <<EOC
listeners:
  - {name: lan, type: tcp, address: "127.0.0.1:$LAN"}
  - {name: rs485, type: serial, device: "$T/ttyGW", baud: 115200}
metrics: {address: "127.0.0.1:$WEB"}
persistence: {dir: "$T/state"}
bridges:
  - name: cloud
    addresses: ["tcp://127.0.0.1:$CLOUD"]
    client_id: edge-demo
    clean_session: false
    reconnect_min: 500ms
    reconnect_max: 2s
    topics:
      - {pattern: "sensors/#", direction: out, qos: 1, remote_prefix: "site-a/"}
EOC

start_cloud
"$T/edgegw" --config "$T/edgegw.yaml" >"$T/edgegw.log" 2>&1 &
pids="$pids $!"
waitport 127.0.0.1 "$WEB"
"$T/edgegw" sensor --device "$T/ttySensor" --id rs485-temp-1 --rate 5/s >"$T/sensor.log" 2>&1 &
pids="$pids $!"
mosquitto_sub -h 127.0.0.1 -p "$LAN" -V mqttv5 -i dashboard -t 'sensors/#' -q 1 >/dev/null &
pids="$pids $!"
( n=0; while :; do n=$((n+1)); mosquitto_pub -h 127.0.0.1 -p "$LAN" -i meter-7 -q 1 -t sensors/meter-7/power -m "{\"w\":$n}" || true; sleep 0.1; done ) &
pids="$pids $!"

sleep "$UP_FOR"
echo "uplink up:"; facts; expect connected empty keeping_up; shot up; check_refresh
kill "$CLOUD_PID"; wait "$CLOUD_PID" 2>/dev/null || true
sleep "$DOWN_FOR"
echo "uplink down for ${DOWN_FOR}s:"; facts; expect disconnected not_draining; shot outage
start_cloud
sleep "$AFTER"
echo "uplink back for ${AFTER}s:"; facts; expect connected empty keeping_up draining; shot recovered
