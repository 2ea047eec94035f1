# Release artifacts (included from the Makefile). Not part of `make test`.
#
#   make dist             static binaries for linux arm64, armv7, armv6 and
#                         amd64 plus one .deb each (arm64, armhf, armel,
#                         amd64) and SHA256SUMS, all under dist/
#   make deb              only the .deb packages (DEB_ARCHS, default all)
#   make test-packaging   build the amd64 .deb and check it: lintian,
#                         contents (with edgegw(1), made by `edgegw man`
#                         from the --help text), an install into a
#                         throwaway root
#   make dist-clean       remove dist/
#
# The work is in scripts/build-dist.sh; nfpm runs through `go run` pinned to
# a version, so it never enters go.mod. Debian version:
# `scripts/build-dist.sh version`.

DIST_DIR  ?= dist
DEB_ARCHS ?= arm64 armhf armel amd64
NFPM      ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2

DIST_ENV = GO='$(GO)' DIST_DIR='$(DIST_DIR)' NFPM='$(NFPM)' VERSION='$(VERSION)' COMMIT='$(COMMIT)'

.PHONY: dist deb test-packaging dist-clean

dist:
	rm -rf '$(DIST_DIR)'
	$(DIST_ENV) ./scripts/build-dist.sh bin arm64 armhf armel amd64
	$(DIST_ENV) ./scripts/build-dist.sh deb arm64 armhf armel amd64
	$(DIST_ENV) ./scripts/build-dist.sh sums

deb:
	$(DIST_ENV) ./scripts/build-dist.sh deb $(DEB_ARCHS)

test-packaging:
	rm -rf '$(DIST_DIR)/test'
	$(DIST_ENV) DIST_DIR='$(DIST_DIR)/test' ./scripts/build-dist.sh deb amd64
	./packaging/check-deb.sh '$(DIST_DIR)'/test/edgegw_*_amd64.deb

dist-clean:
	rm -rf '$(DIST_DIR)'

# ARM builds under qemu-user (installs qemu-user-static if missing).
.PHONY: test-arm
test-arm:
	./scripts/test-arm.sh
