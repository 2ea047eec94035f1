# Flaky-test hunt; included from the Makefile. Not part of `make test`.
#
#   make flaky    the Go suite (go test -race) FLAKY_COUNT times with
#                 FLAKY_BUSY busy-loop processes beside it (a loaded
#                 machine), bounded by FLAKY_TIMEOUT; then every test that
#                 failed even once, with its package, how many runs it
#                 failed and its last log line; fails if any did.
#                 scripts/flaky.sh does the work. The whole suite three
#                 times takes 30-60 min on a 2-core machine: narrow it with
#                 FLAKY_PKG="./bridge/ ./listeners/" or FLAKY_RUN=TestX.
#
# Knobs: FLAKY_COUNT (3), FLAKY_BUSY (4), FLAKY_PKG (./...), FLAKY_RUN
# (a go test -run pattern), FLAKY_TIMEOUT (90m, all runs together),
# FLAKY_GO_TIMEOUT (go test -timeout per package and run, 30m), FLAKY_OUT
# (keep each run's go test -json output in this directory).

FLAKY_COUNT      ?= 3
FLAKY_BUSY       ?= 4
FLAKY_PKG        ?= ./...
FLAKY_RUN        ?=
FLAKY_TIMEOUT    ?= 90m
FLAKY_GO_TIMEOUT ?= 30m
FLAKY_OUT        ?=

.PHONY: flaky

flaky: test-deps
	GO='$(GO)' FLAKY_COUNT='$(FLAKY_COUNT)' FLAKY_BUSY='$(FLAKY_BUSY)' FLAKY_PKG='$(FLAKY_PKG)' \
	  FLAKY_RUN='$(FLAKY_RUN)' FLAKY_TIMEOUT='$(FLAKY_TIMEOUT)' FLAKY_GO_TIMEOUT='$(FLAKY_GO_TIMEOUT)' \
	  FLAKY_OUT='$(FLAKY_OUT)' ./scripts/flaky.sh
