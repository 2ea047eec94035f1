# Hostile-client suite; included from the Makefile. Not part of `make test`.
#
#   make hostile    bin/edgegw (as `make build` ships it) and Debian's
#                   mosquitto side by side on free 127.0.0.1 ports, same
#                   users and ACL, anonymous off; 13 attacks, a fresh broker
#                   per attack and broker (~4-5 min in all). Writes
#                   hostile/results/latest.md and latest.jsonl. See
#                   hostile/README.md. Knobs: HOSTILE_ATTACKS="a,b"
#                   (default all), HOSTILE_BROKERS (default edgegw,mosquitto),
#                   MOSQUITTO (default /usr/sbin/mosquitto).
#
# The suite's own measurement and report code is tested by `go test
# ./hostile/` (part of `make test`, seconds).

HOSTILE_ATTACKS ?=
HOSTILE_BROKERS ?= edgegw,mosquitto
MOSQUITTO       ?= /usr/sbin/mosquitto

.PHONY: hostile

hostile: build
	$(GO) build -o bin/edgegw-hostile ./hostile
	timeout 15m bin/edgegw-hostile -edgegw bin/edgegw -mosquitto '$(MOSQUITTO)' \
	  -brokers '$(HOSTILE_BROKERS)' -attacks '$(HOSTILE_ATTACKS)' \
	  -label '$(VERSION)' -out hostile/results
