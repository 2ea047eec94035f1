#!/bin/sh
# Checks a built edgegw .deb (make test-packaging): control fields,
# contents (with the edgegw(1) man page) and conffiles, lintian (no errors,
# and none of the warnings fixed before), then an unpack into a
# throwaway root with `dpkg --root`, where the unit must find its binary
# (systemd-analyze verify --root), the sysusers and tmpfiles entries must
# apply, and the binary must run.
#
# Maintainer scripts are not run here (they would run chrooted, and the
# throwaway root has no shell); packaging/scripts_test.go runs them against
# stubbed commands.
set -eu

deb=${1:?usage: check-deb.sh FILE.deb}
fail() { echo "check-deb: FAIL: $*" >&2; exit 1; }

for tool in dpkg-deb dpkg lintian systemd-analyze systemd-sysusers systemd-tmpfiles; do
	command -v "$tool" >/dev/null 2>&1 ||
		fail "$tool not found (apt-get install lintian dpkg-dev systemd)"
done

echo "== dpkg-deb --info $deb"
dpkg-deb --info "$deb"
[ "$(dpkg-deb -f "$deb" Package)" = edgegw ] || fail "Package is not edgegw"
arch=$(dpkg-deb -f "$deb" Architecture)
case $deb in *"_$arch.deb") ;; *) fail "Architecture $arch does not match the file name" ;; esac

echo "== dpkg-deb --contents"
contents=$(dpkg-deb --contents "$deb")
echo "$contents"
for want in \
	./usr/bin/edgegw \
	./usr/lib/systemd/system/edgegw.service \
	./usr/lib/sysusers.d/edgegw.conf \
	./usr/lib/tmpfiles.d/edgegw.conf \
	./etc/edgegw/edgegw.yaml \
	./etc/default/edgegw \
	./usr/share/doc/edgegw/copyright \
	./usr/share/doc/edgegw/changelog.Debian.gz \
	./usr/share/doc/edgegw/README.md \
	./usr/share/doc/edgegw/install.md \
	./usr/share/doc/edgegw/config.md \
	./usr/share/doc/edgegw/status-page-up.png \
	./usr/share/man/man1/edgegw.1.gz; do
	echo "$contents" | awk '{print $6}' | grep -qx "$want" || fail "missing $want"
done
echo "$contents" | awk '$1 ~ /^-/ && $2 != "root/root" {bad=1; print "not root/root: " $0} END {exit bad}' ||
	fail "files must be owned by root/root"
echo "$contents" | grep -q ' ./usr/bin/edgegw$' && echo "$contents" | grep ' ./usr/bin/edgegw$' | grep -q '^-rwxr-xr-x' ||
	fail "/usr/bin/edgegw is not 0755"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
dpkg-deb --ctrl-tarfile "$deb" | tar -x -C "$tmp"
grep -qx /etc/edgegw/edgegw.yaml "$tmp/conffiles" || fail "/etc/edgegw/edgegw.yaml is not a conffile"
grep -qx /etc/default/edgegw "$tmp/conffiles" || fail "/etc/default/edgegw is not a conffile"
for s in postinst prerm postrm; do
	[ -x "$tmp/$s" ] || fail "maintainer script $s missing or not executable"
	sh -n "$tmp/$s" || fail "$s: syntax error"
done
rm -rf "$tmp"/*

echo "== lintian"
# Errors fail; warnings are printed for the report. --allow-root: CI runs
# as root.
lintian --allow-root --tag-display-limit 0 --display-info "$deb" >"$tmp/lintian.txt" 2>&1 || true
cat "$tmp/lintian.txt"
if grep -q '^E: ' "$tmp/lintian.txt"; then fail "lintian reported errors"; fi
# Warnings we have fixed stay fixed.
for tag in no-manual-page manpage-has-errors-from-man manpage-has-bad-whatis-entry; do
	if grep -q "^[EW]: edgegw: $tag" "$tmp/lintian.txt"; then fail "lintian: $tag"; fi
done

echo "== dpkg --root (unpack into a throwaway root)"
root=$tmp/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
: >"$root/var/lib/dpkg/status"
: >"$root/var/lib/dpkg/available"
# --unpack runs no maintainer script (there is no preinst); the layout is
# exactly what a real install puts on disk before postinst.
dpkg --root="$root" --force-architecture --force-not-root --unpack "$deb" >/dev/null
dpkg --root="$root" -L edgegw >/dev/null || fail "dpkg does not know the package"
[ -f "$root/etc/edgegw/edgegw.yaml.dpkg-new" ] || fail "conffile not unpacked"
dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Conffiles}\n' edgegw | grep -q /etc/edgegw/edgegw.yaml ||
	fail "dpkg did not register the conffile"

# The unit's paths resolve inside the root: ExecStart (and any other Exec*).
unit=$root/usr/lib/systemd/system/edgegw.service
for p in $(sed -n 's/^Exec[A-Za-z]*=[-@+!:]*\([^ ]*\).*/\1/p' "$unit" | sort -u); do
	case $p in /usr/bin/edgegw) [ -x "$root$p" ] || fail "$p (from the unit) not in the package" ;; esac
done
grep -q '/usr/bin/edgegw .*--config /etc/edgegw/edgegw.yaml' "$unit" || fail "unit does not use /etc/edgegw/edgegw.yaml"
grep -qx 'EnvironmentFile=/etc/default/edgegw' "$unit" || fail "unit does not read /etc/default/edgegw"
# What a Debian target already has: systemd's own units (sysinit.target,
# network-online.target, ...) and /bin/sh and /bin/kill (dash, procps).
cp -Rn /usr/lib/systemd/system/. "$root/usr/lib/systemd/system/" 2>/dev/null ||
	cp -Rn /lib/systemd/system/. "$root/usr/lib/systemd/system/"
mkdir -p "$root/bin"
cp /bin/sh /bin/kill "$root/bin/"
out=$(systemd-analyze verify --root="$root" edgegw.service 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || echo "verify: $out"

# sysusers and tmpfiles apply inside the root.
cp /etc/group "$root/etc/group"   # dialout and friends, as on the target
: >"$root/etc/passwd"
systemd-sysusers --root="$root" || fail "systemd-sysusers"
grep -q '^edgegw:' "$root/etc/passwd" || fail "sysusers did not create edgegw"
systemd-tmpfiles --root="$root" --create edgegw.conf || fail "systemd-tmpfiles"
[ -d "$root/var/lib/edgegw" ] || fail "tmpfiles did not create /var/lib/edgegw"

# The binary runs, and accepts the shipped config.
if [ "$arch" = "$(dpkg --print-architecture)" ]; then
	"$root/usr/bin/edgegw" version
	# The serial sensor simulator ships as a subcommand (docs/listeners.md).
	"$root/usr/bin/edgegw" sensor --help | grep -q -- '-device PATH' ||
		fail "edgegw sensor --help does not work in the packaged binary"
	# The man page is the binary's own help (cmd/edgegw man.go).
	zcat "$root/usr/share/man/man1/edgegw.1.gz" | grep -q '^\.SH NAME' ||
		fail "edgegw.1.gz is not a man page"
	"$root/usr/bin/edgegw" --help | grep -q 'check-config' ||
		fail "edgegw --help does not work in the packaged binary"
	# Until configure, dpkg keeps a new conffile as .dpkg-new.
	"$root/usr/bin/edgegw" check-config --config "$root/etc/edgegw/edgegw.yaml.dpkg-new" >/dev/null ||
		fail "the shipped config does not pass check-config"
fi
echo "check-deb: ok: $deb"
