#!/bin/sh
# make flaky: the Go suite (go test -race) FLAKY_COUNT times in a row with
# FLAKY_BUSY busy-loop processes beside it, as on a loaded machine, then
# every test that failed even once: how many times, its package, and the
# last line it logged in the first run it failed (its failure, mostly). Exits 1 if any test failed (or a run was cut
# off by FLAKY_TIMEOUT), 0 otherwise.
#
# A run is one `go test -race -count=1 -json` over FLAKY_PKG (a fresh
# process per package and run, so a failure of one run cannot take the
# later ones with it). The whole of it is bounded by FLAKY_TIMEOUT: a run
# still going then is stopped with its process group and reported as cut
# off. The busy processes and a run in progress are killed on any exit.
#
# Knobs (environment): GO (go), FLAKY_COUNT (3), FLAKY_BUSY (4), FLAKY_PKG
# (./...), FLAKY_RUN (a -run pattern; empty: every test), FLAKY_TIMEOUT
# (total, seconds or with a suffix s/m/h; 90m), FLAKY_GO_TIMEOUT (go
# test's -timeout per package and run; 30m), FLAKY_OUT (a directory to
# keep each run's JSON in; empty: a temporary one, removed).
set -eu
cd "$(dirname "$0")/.."

GO=${GO:-go}
count=${FLAKY_COUNT:-3}
busy=${FLAKY_BUSY:-4}
pkgs=${FLAKY_PKG:-./...}
run=${FLAKY_RUN:-}
gotimeout=${FLAKY_GO_TIMEOUT:-30m}

seconds() { # 90m, 2h, 300s, 300 -> seconds
	case $1 in
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
deadline=$(($(date +%s) + $(seconds "${FLAKY_TIMEOUT:-90m}")))

if [ -n "${FLAKY_OUT:-}" ]; then
	out=$FLAKY_OUT
	mkdir -p "$out"
	rm -f "$out"/run-*.json "$out"/run-*.err
	keep=1
else
	out=$(mktemp -d)
	keep=
fi

busypids=
gopid=
cleanup() {
	[ -z "$gopid" ] || kill -KILL "-$gopid" 2>/dev/null || true
	# shellcheck disable=SC2086 # a list of pids
	[ -z "$busypids" ] || kill $busypids 2>/dev/null || true
	[ -n "$keep" ] || rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

i=0
while [ "$i" -lt "$busy" ]; do
	sh -c 'while :; do :; done' &
	busypids="$busypids $!"
	i=$((i + 1))
done

runargs=
[ -z "$run" ] || runargs="-run=$run"
echo "== make flaky: $count run(s) of go test -race $pkgs${run:+ -run $run} beside $busy busy process(es), at most ${FLAKY_TIMEOUT:-90m}"
cut=
n=1
while [ "$n" -le "$count" ]; do
	start=$(date +%s)
	# In a session of its own, so that the deadline stops the test
	# binaries too, not only go: its leader writes its id (the process
	# group's) to pgid.
	rm -f "$out/pgid"
	# shellcheck disable=SC2016,SC2086 # $$ is the inner shell's; pkgs is a list
	setsid -w sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$out/pgid" \
		"$GO" test -race -count=1 -json -timeout "$gotimeout" $runargs $pkgs >"$out/run-$n.json" 2>"$out/run-$n.err" &
	waitpid=$!
	while kill -0 "$waitpid" 2>/dev/null; do
		[ -n "$gopid" ] || gopid=$(cat "$out/pgid" 2>/dev/null || true)
		if [ "$(date +%s)" -ge "$deadline" ]; then
			cut=$n
			if [ -n "$gopid" ]; then
				kill -TERM "-$gopid" 2>/dev/null || true
				sleep 5
				kill -KILL "-$gopid" 2>/dev/null || true
			fi
			break
		fi
		sleep 1
	done
	rc=0
	wait "$waitpid" || rc=$?
	gopid=
	echo "== run $n: go test exit $rc after $(($(date +%s) - start))s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	[ -z "$cut" ] || break
	n=$((n + 1))
done

# The report: a test that failed in a run counts once for it; a parent
# test failing only because a subtest did is not listed beside it; a
# package failure with no test failing (build error, panic outside a
# test, its go test timeout) is listed as the package's.
status=0
python3 - "$out" "$((n > count ? count : n))" <<'EOF' || status=$?
import glob, json, os, re, sys

out, runs = sys.argv[1], int(sys.argv[2])
fails = {}   # (package, test) -> number of runs it failed in
first = {}   # (package, test) -> its failure, from the first run it failed in
msg = re.compile(r'^\s*(\S+_test\.go:\d+: .*|panic: .*|FAIL\t.*|.*build failed.*|# .*)$')
for path in sorted(glob.glob(os.path.join(out, 'run-*.json'))):
    failed, lines = set(), {}
    with open(path, errors='replace') as f:
        for raw in f:
            try:
                e = json.loads(raw)
            except ValueError:
                continue
            key = (e.get('Package', ''), e.get('Test', ''))
            if e.get('Action') == 'output':
                text = e.get('Output', '').rstrip('\n')
                # the last such line: t.Logf looks like t.Errorf, and
                # the failure is usually what a test said last
                if msg.match(text) and not text.lstrip().startswith('--- '):
                    lines[key] = text.strip()
            elif e.get('Action') == 'fail':
                failed.add(key)
    for pkg, test in failed:
        if any(p == pkg and t != test and (test == '' or t.startswith(test + '/')) for p, t in failed):
            continue  # a subtest (or, for the package, a test) says more
        key = (pkg, test)
        fails[key] = fails.get(key, 0) + 1
        if key not in first:
            first[key] = lines.get(key) or lines.get((pkg, '')) or ''
    err = path[:-len('.json')] + '.err'
    if os.path.exists(err) and os.path.getsize(err) and not failed:
        with open(err, errors='replace') as f:
            text = f.read().strip()
        if text:
            print('== ' + os.path.basename(err) + ':\n' + text[:2000])
if not fails:
    print('== make flaky: no test failed in %d run(s)' % runs)
    sys.exit(0)
print('== make flaky: %d test(s) failed at least once in %d run(s):' % (len(fails), runs))
for (pkg, test), k in sorted(fails.items(), key=lambda kv: (-kv[1], kv[0])):
    print('  %d/%d  %s  %s' % (k, runs, pkg, test or '(the package, outside any test)'))
    if first[(pkg, test)]:
        print('          ' + first[(pkg, test)][:300])
sys.exit(1)
EOF
if [ -n "$cut" ]; then
	echo "== make flaky: run $cut cut off by FLAKY_TIMEOUT=${FLAKY_TIMEOUT:-90m}: what it had not finished is not in the list"
	status=1
fi
[ -z "$keep" ] || echo "== make flaky: the runs' JSON is in $out"
exit "$status"
