#!/bin/sh
# Runs edgegw's ARM builds under qemu-user: the binary for each target
# answers `version` and validates the reference config, and the codec,
# topic tree and broker test suites pass on arm64 and 32-bit ARM (armv6,
# the Pi Zero's; 32-bit catches alignment and int-size mistakes).
#
# Installs qemu-user-static if missing. Not part of `make test` (slow).
set -eu
cd "$(dirname "$0")/.."

if ! command -v qemu-aarch64-static >/dev/null 2>&1; then
	SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq qemu-user-static
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# roundtrip runs the emulated binary as a broker and passes one QoS 2
# message through it with mosquitto_sub/mosquitto_pub.
roundtrip() { # qemu binary
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	printf 'listeners:\n  - {name: lan, type: tcp, address: "127.0.0.1:%s"}\nmetrics: {address: ""}\n' "$port" >"$out/rt.yaml"
	"$1" "$2" --config "$out/rt.yaml" 2>"$out/rt.log" &
	gw=$!
	i=0
	until mosquitto_pub -h 127.0.0.1 -p "$port" -t ping -m x -q 0 2>/dev/null; do
		i=$((i + 1)); [ $i -lt 100 ] || { cat "$out/rt.log"; kill $gw; exit 1; }
		sleep 0.1
	done
	mosquitto_sub -h 127.0.0.1 -p "$port" -t arm/rt -q 2 -C 1 -W 20 >"$out/rt.out" &
	sub=$!
	i=0
	while kill -0 $sub 2>/dev/null && [ $i -lt 50 ]; do
		mosquitto_pub -h 127.0.0.1 -p "$port" -t arm/rt -m "hello from $(basename "$2")" -q 2
		i=$((i + 1)); sleep 0.2
	done
	wait $sub || { echo "round trip failed"; cat "$out/rt.log"; kill $gw; exit 1; }
	kill -TERM $gw; wait $gw || true
	echo "round trip: $(cat "$out/rt.out")"
}

run() { # arch goarm qemu
	arch=$1 goarm=$2 qemu=$3
	echo "== linux/$arch${goarm:+ GOARM=$goarm}"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOARM=$goarm go build -trimpath -o "$out/edgegw-$arch$goarm" ./cmd/edgegw
	v=$("$qemu" "$out/edgegw-$arch$goarm" version)
	echo "$v"
	# ARMv6 and ARMv7 builds must be told apart by `edgegw version`.
	if [ -n "$goarm" ] && ! echo "$v" | grep -q "linux/arm (GOARM=$goarm)"; then
		echo "FAIL: version does not say linux/arm (GOARM=$goarm)" >&2
		exit 1
	fi
	"$qemu" "$out/edgegw-$arch$goarm" check-config --config configs/edgegw.yaml >/dev/null
	roundtrip "$qemu" "$out/edgegw-$arch$goarm"
	for pkg in ./gateway/packet ./gateway/topics ./devices/framing ./gateway; do
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOARM=$goarm go test -c -o "$out/t.test" "$pkg"
		# The broker suite runs external tools (mosquitto clients): only its
		# self-contained tests run under emulation.
		filter=""
		[ "$pkg" = ./gateway ] && filter="-test.run=TestPaho|TestSelfSubscribedPublisher|TestAsyncSink|TestQoS0NotGatedByWindow"
		(cd "$pkg" && "$qemu" "$out/t.test" -test.short $filter) | tail -1
	done
}

run arm64 "" qemu-aarch64-static
run arm 7 qemu-arm-static
run arm 6 qemu-arm-static
