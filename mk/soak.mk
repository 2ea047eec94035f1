# Soak runs; included from the Makefile. Not part of `make test`.
#
#   make soak [DURATION=10m]   field report 002 against the real binary:
#                     bin/edgegw on free loopback ports, `edgegw-bench slowsub`
#                     for DURATION, RSS and /metrics sampled every second until
#                     the sessions have expired; writes soak/results/<date>.csv,
#                     latest.csv, latest.png, latest.md; fails if queued bytes
#                     exceed memory_budget or sessions/queued bytes are not 0 at
#                     the end. SOAK_DURATION is the same knob; SOAK_BROKERS=
#                     "edgegw mosquitto" adds mosquitto's RSS. See soak/README.md.
#   make soak-test    the in-process reproducer (gateway/soak_test.go; plain
#                     `go test` runs it for 2 s per phase) under
#                     -race for SOAK_DURATION per phase: heap back to baseline,
#                     no goroutine leaks.
#   make soak-bench   slowsub through bench/run.sh (edgegw and mosquitto).

SOAK_DURATION ?= 10m
# DURATION given on the command line or in the environment wins.
ifneq ($(filter command line environment,$(origin DURATION)),)
SOAK_DURATION := $(DURATION)
endif
SOAK_BROKERS ?= edgegw

.PHONY: soak soak-test soak-bench

soak:
	SOAK_DURATION=$(SOAK_DURATION) SOAK_BROKERS="$(SOAK_BROKERS)" GO=$(GO) ./soak/run.sh

soak-test:
	EDGEGW_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -race -count=1 -timeout 0 -run 'TestSoakNeverAckingFlappingSubscriber' -v ./gateway/

soak-bench:
	BENCH_DURATION=$(SOAK_DURATION) BENCH_SCENARIOS=slowsub ./bench/run.sh
