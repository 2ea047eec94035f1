// Package packaging holds how edgegw is shipped, and the tests that keep it
// honest. There is no Go API here: the files are
//
//   - nfpm.yaml: the .deb layout (built per architecture by
//     scripts/build-dist.sh, `make dist` / `make deb`);
//   - scripts/: the maintainer scripts (postinst, prerm, postrm);
//   - copyright: the Debian copyright file, one paragraph per linked module;
//   - lintian/edgegw: lintian overrides, each with its reason;
//   - check-deb.sh: the checks `make test-packaging` runs on a built .deb.
//
// The tests (run by `make test`) verify ../systemd/edgegw.service with
// systemd-analyze, check its required directives, run the maintainer
// scripts against stubbed commands, and build the linux/arm64 binary to hold
// it to a size budget and a module allowlist.
package packaging
