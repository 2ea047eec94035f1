#!/bin/sh
# Installs what `make screenshots` needs beyond the test suite: Debian's
# chromium (headless), plus mosquitto for the uplink. Not part of
# `make test`: the test suite never starts a browser.
set -eu

need=""
command -v chromium >/dev/null 2>&1 || need="$need chromium"
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need="$need mosquitto"
command -v mosquitto_pub >/dev/null 2>&1 || need="$need mosquitto-clients"
command -v curl >/dev/null 2>&1 || need="$need curl"
# The page's fonts: a headless chromium without any font renders boxes.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need="$need fonts-dejavu-core"

if [ -n "$need" ]; then
	echo "installing:$need"
	SUDO=""
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $need
fi
