# edgegw — build, test and ship.
#
#   make test     install test dependencies (if missing), then gofmt, vet,
#                 race tests, packaging and ARM (qemu) checks: every one of
#                 them runs even when an earlier one fails, a summary says
#                 which failed, and make test fails if any did
#   make flaky    the race tests several times beside busy processes: every
#                 test that failed even once (mk/flaky.mk)
#   make build    build ./bin/edgegw for this machine

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PKG      := ./...

.PHONY: all build test go-test test-deps vet fmt-check fuzz

# Fragments: mk/bench.mk (make bench), mk/dist.mk (make dist, deb),
# mk/soak.mk (make soak), mk/fleet.mk (make fleet: 20 gateways into a 3-node
# NATS cluster, a node killed; bench/fleet), mk/hostile.mk (make hostile: attacks side by side
# with mosquitto; not part of make test), mk/flaky.mk (make flaky),
# mk/crashsim.mk (make crashsim: power-cut crash states of the spool and
# the state store; make test runs a sample of them).
-include mk/*.mk

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/edgegw ./cmd/edgegw

test-deps:
	./scripts/install-test-deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKG)

# The whole suite: race tests of every package, then the release checks
# (the amd64 .deb with lintian and an install into a throwaway root; the
# ARM binaries and test suites under qemu-user). Without the dependencies
# nothing can run, so a failed test-deps stops here; after it each step
# runs whatever the earlier ones did, so that one red step does not hide
# the state of the others, and the summary names every failed one.
TEST_STEPS := fmt-check vet go-test test-packaging test-arm

test: test-deps
	@failed=; summary=; \
	for step in $(TEST_STEPS); do \
	  echo "== make $$step"; start=$$(date +%s); \
	  if $(MAKE) --no-print-directory $$step; then res=ok; else res=FAILED; failed="$$failed $$step"; fi; \
	  took=$$(( $$(date +%s) - start )); \
	  echo "== make $$step: $$res ($${took}s)"; \
	  summary="$$summary$$(printf '  %-16s %-6s %5ss' $$step $$res $$took)\n"; \
	done; \
	printf '== make test summary:\n%b' "$$summary"; \
	if [ -n "$$failed" ]; then echo "== make test FAILED:$$failed"; exit 1; fi; \
	echo "== make test: all passed"

go-test:
	$(GO) test -race -timeout 15m $(PKG)

# Short fuzz runs of every fuzz target (FUZZTIME per target).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list $(PKG)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done
