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
#   make crash-drain CRASH_DRAIN_RUNS=3 CRASH_DRAIN_RECORDS=700 CRASH_DRAIN_RTT=200ms
#                     the same with a smaller backlog through a proxy that
#                     delays each way by half the RTT.

CRASH_DRAIN_RUNS ?= 10
CRASH_DRAIN_RECORDS ?= 3000
CRASH_DRAIN_RTT ?= 0s

.PHONY: crash-drain

crash-drain:
	EDGEGW_CRASH_DRAIN_RUNS=$(CRASH_DRAIN_RUNS) EDGEGW_CRASH_DRAIN_RECORDS=$(CRASH_DRAIN_RECORDS) \
	EDGEGW_CRASH_DRAIN_RTT=$(CRASH_DRAIN_RTT) $(GO) test -race -count=1 -timeout 0 -run '^TestKillWhileDraining$$' -v ./bridge/session/
