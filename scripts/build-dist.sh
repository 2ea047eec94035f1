#!/bin/sh
# Builds release artifacts under $DIST_DIR (default dist/): static binaries
# and .deb packages. Called by mk/dist.mk (`make dist`, `make deb`), which
# passes GO, VERSION, COMMIT and NFPM; it also runs on its own:
#
#   scripts/build-dist.sh version          print the Debian version
#   scripts/build-dist.sh bin  ARCH...     dist/edgegw_<ver>_linux_<suffix>
#   scripts/build-dist.sh deb  ARCH...     binaries + dist/edgegw_<ver>-1_<ARCH>.deb
#   scripts/build-dist.sh sums             dist/SHA256SUMS
#
# ARCH is a Debian architecture: arm64, armhf (GOARM=7), armel (GOARM=6),
# amd64. The Debian version comes from `git describe`: tag v1.2.3 gives
# 1.2.3, 5 commits later 1.2.3+git5.<sha>; without a tag
# 0.0.0~git<commit date>.<sha>; "+dirty" for uncommitted changes.
set -eu
cd "$(dirname "$0")/.."

GO=${GO:-go}
DIST_DIR=${DIST_DIR:-dist}
NFPM=${NFPM:-"$GO run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2"}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
# Debian revision of the package itself (bump to rebuild the same source).
DEB_REVISION=${DEB_REVISION:-1}
MAINTAINER=${MAINTAINER:-"edgegw developers <edgegw@users.noreply.github.com>"}

debversion() {
	dirty=""
	if ! git diff --quiet HEAD -- 2>/dev/null; then dirty="+dirty"; fi
	if desc=$(git describe --tags --long --match 'v[0-9]*' 2>/dev/null); then
		# v1.2.3-5-gabcdef0 -> tag v1.2.3, 5 commits, sha abcdef0
		sha=${desc##*-g}
		rest=${desc%-g*}
		n=${rest##*-}
		tag=${rest%-*}
		v=$(printf '%s' "${tag#v}" | tr -c 'A-Za-z0-9.+~\n' '~')
		if [ "$n" = 0 ]; then echo "$v$dirty"; else echo "$v+git$n.$sha$dirty"; fi
	elif sha=$(git rev-parse --short HEAD 2>/dev/null); then
		date=$(TZ=UTC git log -1 --date=format-local:%Y%m%d --format=%cd)
		echo "0.0.0~git$date.$sha$dirty"
	else
		echo "0.0.0~dev"
	fi
}

DEB_VERSION=${DEB_VERSION:-$(debversion)}

# goenv ARCH: the GOARCH/GOARM pair and the binary name suffix.
goenv() {
	case $1 in
	arm64) echo "arm64 '' arm64" ;;
	armhf) echo "arm 7 armv7" ;;
	armel) echo "arm 6 armv6" ;;
	amd64) echo "amd64 '' amd64" ;;
	*) echo "build-dist: unknown architecture $1 (want arm64 armhf armel amd64)" >&2; exit 2 ;;
	esac
}

binpath() {
	set -- $(goenv "$1")
	echo "$DIST_DIR/edgegw_${DEB_VERSION}_linux_$3"
}

build_bin() {
	out=$(binpath "$1")
	eval "set -- $(goenv "$1")"
	echo "build $out (GOARCH=$1 GOARM=$2)"
	CGO_ENABLED=0 GOOS=linux GOARCH=$1 GOARM=$2 \
		$GO build -trimpath -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
		-o "$out" ./cmd/edgegw
}

# Fixed file times (and the man page's date): the same commit gives the
# same package.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH

# stage_docs DIR: the files nfpm takes from outside the source tree: the
# Debian changelog, and edgegw(1), which the binary prints from its own
# --help text (`edgegw man`, run for the build machine).
stage_docs() {
	mkdir -p "$1"
	GOOS=$($GO env GOHOSTOS) GOARCH=$($GO env GOHOSTARCH) CGO_ENABLED=0 \
		$GO run -ldflags "-X main.version=$VERSION -X main.commit=$COMMIT" ./cmd/edgegw man >"$1/edgegw.1"
	gzip -9n "$1/edgegw.1"
	date=$(git log -1 --format=%aD 2>/dev/null || date -R)
	{
		printf 'edgegw (%s-%s) unstable; urgency=medium\n\n' "$DEB_VERSION" "$DEB_REVISION"
		printf '  * Build of %s (commit %s).\n\n' "$VERSION" "$COMMIT"
		printf ' -- %s  %s\n' "$MAINTAINER" "$date"
	} | gzip -9n >"$1/changelog.Debian.gz"
}

build_deb() {
	arch=$1
	bin=$(binpath "$arch")
	[ -f "$bin" ] || build_bin "$arch"
	stage=$(mktemp -d)
	stage_docs "$stage"
	out=$DIST_DIR/edgegw_${DEB_VERSION}-${DEB_REVISION}_${arch}.deb
	echo "package $out"
	EDGEGW_BINARY=$bin EDGEGW_STAGE=$stage EDGEGW_DEB_ARCH=$arch \
	EDGEGW_VERSION=$DEB_VERSION EDGEGW_RELEASE=$DEB_REVISION EDGEGW_MAINTAINER=$MAINTAINER \
		$NFPM package --config packaging/nfpm.yaml --packager deb --target "$out"
	rm -rf "$stage"
}

mode=${1:-}
[ $# -gt 0 ] && shift
mkdir -p "$DIST_DIR"
case $mode in
version) echo "$DEB_VERSION" ;;
bin) for a in "$@"; do build_bin "$a"; done ;;
deb) for a in "$@"; do build_deb "$a"; done ;;
sums) (cd "$DIST_DIR" && rm -f SHA256SUMS && sha256sum edgegw_* >SHA256SUMS) ;;
*) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
