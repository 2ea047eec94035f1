#!/bin/sh
# Installs what the test suite needs on a fresh Debian machine. Packages are
# installed only when missing, so this is cheap to run before every test run.
set -eu

need=""
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need="$need mosquitto"
command -v mosquitto_pub >/dev/null 2>&1 || need="$need mosquitto-clients"
command -v socat >/dev/null 2>&1 || need="$need socat"
command -v ss >/dev/null 2>&1 || need="$need iproute2" # ss: sockets left after an abort, whose listener a port is
/usr/bin/python3 -c 'import paho.mqtt.client' >/dev/null 2>&1 || need="$need python3-paho-mqtt"
command -v systemd-analyze >/dev/null 2>&1 || need="$need systemd"
command -v node >/dev/null 2>&1 || need="$need nodejs npm"
command -v lintian >/dev/null 2>&1 || need="$need lintian"
command -v dpkg-deb >/dev/null 2>&1 || need="$need dpkg-dev"
command -v qemu-aarch64-static >/dev/null 2>&1 || need="$need qemu-user-static"
command -v cc >/dev/null 2>&1 || need="$need gcc libc6-dev" # cmd/edgegw TestBinaryDocSerialFramingC compiles the C code of docs/serial-framing.md

if [ -n "$need" ]; then
	echo "installing:$need"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need
fi

# mosquitto's Debian package starts a system broker on 1883; tests use their
# own ports, but a stray system broker would shadow `go run ./cmd/edgegw`.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet mosquitto 2>/dev/null; then
	systemctl stop mosquitto || true
fi
