# Soak and long fault runs; included from the Makefile. Not part of `make test`.
#
#   make soak         field report 002 reproducer for SOAK_DURATION per phase
#                     (default 1h): memory stays inside the configured limits
#                     and returns to baseline; no goroutine leaks.
#   make soak-bench   the same scenario against the real binary and
#                     mosquitto, side by side, RSS sampled (bench slowsub).

SOAK_DURATION ?= 1h

.PHONY: soak soak-bench

soak:
	EDGEGW_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -race -count=1 -timeout 0 -run 'TestFieldReport002Soak' -v ./gateway/

soak-bench:
	BENCH_DURATION=$(SOAK_DURATION) BENCH_SCENARIOS=slowsub ./bench/run.sh
