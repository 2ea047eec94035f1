# Crash runs; included from the Makefile. Not part of `make test` (which
# runs the short case: 300 records, one kill, per protocol).
#
#   make crash-drain [CRASH_DRAIN_RUNS=10]
#                     the uplink's session engine (bridge/session) drains a
#                     backlog of 3,000 QoS 2 records into mosquitto with a
#                     persistent session while its process is killed with
#                     SIGKILL twice, CRASH_DRAIN_RUNS times per protocol
#                     (3.1.1 and 5), on loopback; prints the duplicates and
#                     lost messages of each run (CRASH-DRAIN lines) and
#                     fails on any.

CRASH_DRAIN_RUNS ?= 10

.PHONY: crash-drain

crash-drain:
	EDGEGW_CRASH_DRAIN_RUNS=$(CRASH_DRAIN_RUNS) $(GO) test -race -count=1 -timeout 0 -run '^TestKillWhileDraining$$' -v ./bridge/session/
